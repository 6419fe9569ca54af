"""moto's CloudFormation does not know AWS::Lambda::Url: this teaches it, through moto's own Lambda
backend (create_function_url_config), so a deployed stack's IngestUrl output is a real moto URL config."""

from __future__ import annotations

from typing import Any

from moto.awslambda.models import lambda_backends
from moto.cloudformation import parsing
from moto.core.common_models import CloudFormationModel


class LambdaUrl(CloudFormationModel):
    __module__ = "moto.awslambda.gpuc_test_shim"  # moto's model registry keys models by service name

    def __init__(self, function: str, url: str) -> None:
        self.function, self.url = function, url

    @property
    def physical_resource_id(self) -> str:
        return self.url

    @staticmethod
    def cloudformation_name_type() -> str:
        return ""

    @staticmethod
    def cloudformation_type() -> str:
        return "AWS::Lambda::Url"

    @classmethod
    def has_cfn_attr(cls, attr: str) -> bool:
        return attr in ("FunctionUrl", "FunctionArn")

    def get_cfn_attribute(self, attribute_name: str) -> str:
        return self.url if attribute_name == "FunctionUrl" else self.function

    @classmethod
    def create_from_cloudformation_json(
        cls, resource_name: str, cloudformation_json: dict[str, Any], account_id: str, region_name: str, **kw: Any
    ) -> LambdaUrl:
        props = cloudformation_json["Properties"]
        backend = lambda_backends[account_id][region_name]
        target = props["TargetFunctionArn"]
        try:
            config = backend.get_function_url_config(target)
        except Exception:
            config = backend.create_function_url_config(target, {"AuthType": props["AuthType"]})
        return cls(target, config.url)

    @classmethod
    def update_from_cloudformation_json(
        cls,
        original_resource: Any,
        new_resource_name: str,
        cloudformation_json: dict[str, Any],
        account_id: str,
        region_name: str,
    ) -> LambdaUrl:
        return cls.create_from_cloudformation_json(new_resource_name, cloudformation_json, account_id, region_name)


def install() -> None:
    parsing.get_model_map.cache_clear()
