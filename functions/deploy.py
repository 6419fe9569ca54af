"""`gpuc watchdog deploy`: the code zip (functions/bundle.py), the secrets, infra/template.yaml.

The zip vendors compiled wheels, so the stack's runtime and architecture are set from this interpreter and
another OS is refused (a layer built with `pip install --platform` would need the network at deploy time).

Secrets go to SSM Parameter Store as SecureString (CloudFormation cannot create those) before the
stack, so the first invocation finds them. Every deploy mints a fresh admin token; the parameter's
version goes into the functions' environment so warm containers holding the old token are replaced.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3

from gpuc.core.api import RegisterRequest
from gpuc.core.errors import GpucError
from gpuc.core.settings import Settings
from gpuc.core.settingsload import save_config
from gpuc.core.signing import new_token, new_watchdog_key, watchdog_id
from gpuc.functions.app import STORE_NAME
from gpuc.functions.aws import DEFAULT_SSM_PREFIX, SSM_NAMES_PER_CALL, WATCHDOG_SECRETS
from gpuc.functions.bundle import build_zip
from gpuc.functions.deployplan import ROTATE_TEXT, Plan, secret_values
from gpuc.functions.store import MARKABLE_STATES, SqliteStore

TEMPLATE = Path(__file__).resolve().parent.parent / "infra" / "template.yaml"


class DeployError(GpucError):
    pass


@dataclass
class Deployed:
    url: str
    table: str
    config_path: Path


@dataclass
class Trail:
    """What a deploy has made so far: when it stops half-way, the user is told what it left behind (an S3
    object, secrets in SSM, a stack) and how to remove each, never an "internal error"."""

    step: str = "building the code zip"
    left: list[tuple[str, str]] = field(default_factory=list)  # (what, the command that removes it)

    def made(self, what: str, remove: str) -> None:
        self.left.append((what, remove))

    def hint(self, stack: str) -> str:
        lines = [stack] if stack else []
        if self.left:
            lines.append("it left behind: " + "; ".join(f"{what} (remove: {cmd})" for what, cmd in self.left))
        lines.append("or fix the cause and run `gpuc watchdog deploy` again: it reuses what exists")
        return "\n       ".join(lines)


def deploy(
    settings: Settings,
    plan: Plan,
    *,
    session: Any = None,
    echo: Callable[[str], None] = print,
    waiter_delay_s: int = 5,
) -> Deployed:
    session = session or boto3.Session(region_name=plan.region)
    trail = Trail()
    try:
        return _deploy(settings, plan, session, echo, waiter_delay_s, trail)
    except DeployError:
        raise
    # Any failure half-way (AWS, a waiter's timeout, Ctrl-C) is reported with what it left, never a traceback.
    except (Exception, KeyboardInterrupt) as exc:
        raise DeployError(
            f"the deploy stopped while {trail.step}: {_why(exc)}", hint=trail.hint(_stack_state(session, plan))
        ) from None


def _deploy(
    settings: Settings, plan: Plan, session: Any, echo: Callable[[str], None], delay_s: int, trail: Trail
) -> Deployed:
    refuse_dead_stack(session, plan)
    token = new_token()
    code = build_zip()
    trail.step = "uploading the code to S3"
    bucket, key = upload_code(session, plan, code)
    trail.made(f"the code zip s3://{bucket}/{key}", f"aws s3 rm s3://{bucket}/{key}")
    echo(f"uploaded the code ({len(code) // 1024} KiB) to s3://{bucket}/{key}")
    trail.step = "storing the secrets in SSM"
    values = {**secret_values(settings, plan, token), **watchdog_key_values(session, plan, echo)}
    names = " ".join(f"{plan.ssm_prefix}/{name}" for name in values)
    trail.made(
        f"your keys as SSM SecureString parameters under {plan.ssm_prefix}",
        f"aws ssm delete-parameters --region {plan.region} --names {names}",
    )
    version = store_secrets(session, plan, values)
    echo(f"stored {len(values)} SecureString parameters under {plan.ssm_prefix}")
    trail.step = f"applying the CloudFormation stack {plan.stack_name}"
    outputs = apply_stack(session, plan, bucket, key, version, delay_s)
    trail.step = "reading the stack's outputs"
    url, table = outputs["IngestUrl"], outputs["TableName"]
    trail.step = f"saving the watchdog's URL and token in {settings.home}"
    path = save_config(settings.home, watchdog_url=url, admin_token=token)
    return Deployed(url=url, table=table, config_path=path)


def watchdog_key_values(session: Any, plan: Plan, echo: Callable[[str], None]) -> dict[str, str]:
    """The watchdog's key (kept unless --rotate-key; minted for a new watchdog) and the carried pods' ids.
    Said either way: a key is what every running pod's claim rests on."""
    ssm = session.client("ssm")
    key = None if plan.rotate_key else _parameter(ssm, f"{plan.ssm_prefix}/watchdog_key")
    if key is None:
        key = new_watchdog_key()
        echo(f"watchdog {watchdog_id(key)}: a new key" + (f": {ROTATE_TEXT}" if plan.rotate_key else ""))
    else:
        echo(f"watchdog {watchdog_id(key)}: its key kept (--rotate-key makes a new one)")
    values = {"watchdog_key": key}
    if plan.carried:
        before = (_parameter(ssm, f"{plan.ssm_prefix}/watchdog_carried") or "").split(",")
        values["watchdog_carried"] = ",".join(sorted({*plan.carried, *filter(None, before)}))
        echo(
            f"{len(plan.carried)} carried pods recorded in its config ({plan.ssm_prefix}/watchdog_carried): no "
            "provider re-marks a running pod's env, so their mark still names the local watchdog"
        )
    return values


def _parameter(ssm: Any, name: str) -> str | None:
    try:
        got = ssm.get_parameter(Name=name, WithDecryption=True)
    except ssm.exceptions.ParameterNotFound:
        return None
    value = got["Parameter"].get("Value")
    return str(value) if value else None


def _why(exc: BaseException) -> str:
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted (Ctrl-C)"
    if isinstance(exc, KeyError):
        return f"the stack has no output {exc}: is infra/template.yaml this gpuc's?"
    # botocore messages carry no parameter values; the type and code are the useful part
    return f"{type(exc).__name__}: {exc}"


def _stack_state(session: Any, plan: Plan) -> str:
    """What the stack is now, said so the user knows whether a watchdog still runs."""
    try:
        stacks = session.client("cloudformation").describe_stacks(StackName=plan.stack_name)["Stacks"]
    except Exception:  # no stack, or AWS unreachable: nothing more to say
        return ""
    status = str(stacks[0]["StackStatus"]) if stacks else ""
    delete = f"aws cloudformation delete-stack --region {plan.region} --stack-name {plan.stack_name}"
    if status in DEAD_STACK:
        return f"the stack {plan.stack_name} was not created ({status}) and holds nothing: delete it ({delete})"
    if status == "UPDATE_ROLLBACK_COMPLETE":
        return f"the stack {plan.stack_name} rolled back: your previous watchdog runs unchanged"
    if status.endswith("_IN_PROGRESS"):
        return f"the stack {plan.stack_name} is still {status}: wait for it to settle, then run deploy again"
    return f"the stack {plan.stack_name} is {status}" if status else ""


# A first create that failed leaves the stack in one of these: it holds no resource and cannot be updated.
DEAD_STACK = frozenset({"ROLLBACK_COMPLETE", "ROLLBACK_FAILED", "CREATE_FAILED"})


def refuse_dead_stack(session: Any, plan: Plan) -> None:
    cfn = session.client("cloudformation")
    if not _stack_exists(cfn, plan.stack_name):
        return
    status = cfn.describe_stacks(StackName=plan.stack_name)["Stacks"][0]["StackStatus"]
    if status in DEAD_STACK:
        raise DeployError(
            f"an earlier deploy left the stack {plan.stack_name} in {status}: it holds nothing, and AWS cannot "
            "update it",
            hint=f"delete it (aws cloudformation delete-stack --region {plan.region} --stack-name "
            f"{plan.stack_name}), then run `gpuc watchdog deploy` again",
        )


def live_registrations(settings: Settings) -> list[RegisterRequest]:
    """The pods the local watchdog (`gpuc watchdog serve`, this GPUC_HOME's store) watches now. A new
    deployment that does not know them sees them as strays; carried over, it knows them (with their
    derived keys, so their pings verify there too). Adopted pods are never carried: they have no key."""
    path = settings.home / STORE_NAME
    if not path.exists():
        return []
    store = SqliteStore(path)
    try:
        pods = store.list_pods(MARKABLE_STATES)
    finally:
        store.close()
    return [
        RegisterRequest(
            pod_id=p.pod_id,
            provider=p.provider,
            name=p.name,
            experiment=p.experiment,
            key=p.key,
            gpu=p.gpu,
            price_per_hour=p.price_per_hour,
            started_at=p.started_at,
            interruptible=p.interruptible,
            policy=p.policy,
            carried=True,
            deadline_at=p.deadline_at,  # its deadline travels with it (None: reckoned there as here)
            warm_s=p.warm_s,
        )
        for p in pods
        if p.key and p.origin != "adopted"
    ]


def carry_registrations(
    registrations: Iterable[RegisterRequest], register: Callable[[RegisterRequest], object]
) -> tuple[list[str], list[tuple[str, str]]]:
    """Register each into the new deployment; one failure does not stop the others.
    Returns (carried pod ids, [(pod id, why)] not carried)."""
    carried: list[str] = []
    failed: list[tuple[str, str]] = []
    for request in registrations:
        try:
            register(request)
        except GpucError as exc:
            failed.append((request.pod_id, exc.message))
        else:
            carried.append(request.pod_id)
    return carried, failed


def upload_code(session: Any, plan: Plan, code: bytes) -> tuple[str, str]:
    account = session.client("sts").get_caller_identity()["Account"]
    bucket = f"gpuc-artifacts-{account}-{plan.region}"
    s3 = session.client("s3")
    try:
        s3.head_bucket(Bucket=bucket)
    except s3.exceptions.ClientError:
        extra = {} if plan.region == "us-east-1" else {"CreateBucketConfiguration": {"LocationConstraint": plan.region}}
        s3.create_bucket(Bucket=bucket, **extra)
    key = f"gpuc/watchdog-{hashlib.sha256(code).hexdigest()[:20]}.zip"
    s3.put_object(Bucket=bucket, Key=key, Body=code)
    return bucket, key


def store_secrets(session: Any, plan: Plan, values: dict[str, str]) -> int:
    """Returns the admin token parameter's version."""
    ssm = session.client("ssm")
    version = 0
    for name, value in values.items():
        got = ssm.put_parameter(
            Name=f"{plan.ssm_prefix}/{name}", Value=value, Type="SecureString", Overwrite=True, Tier="Standard"
        )
        if name == "admin_token":
            version = int(got["Version"])
    return version


def apply_stack(session: Any, plan: Plan, bucket: str, key: str, secrets_version: int, delay_s: int) -> dict[str, str]:
    cfn = session.client("cloudformation")
    params = {
        "CodeBucket": bucket,
        "CodeKey": key,
        "SsmPrefix": plan.ssm_prefix,
        "Provider": plan.provider,
        "PythonRuntime": plan.runtime,
        "Architecture": plan.architecture,
        "SecretsVersion": str(secrets_version),
        "PublicUrl": plan.public_url,
        "ReaperRate": plan.reaper_rate,
        "EmulatedSettings": json.dumps(plan.emulated, sort_keys=True) if plan.emulated else "",
        **plan.budget,
    }
    args: dict[str, Any] = {
        "StackName": plan.stack_name,
        "TemplateBody": TEMPLATE.read_text(encoding="utf-8"),
        "Parameters": [{"ParameterKey": k, "ParameterValue": v} for k, v in params.items()],
        "Capabilities": ["CAPABILITY_IAM"],
    }
    if _stack_exists(cfn, plan.stack_name):
        try:
            cfn.update_stack(**args)
        except cfn.exceptions.ClientError as exc:
            if "No updates are to be performed" not in str(exc):
                raise
        else:
            cfn.get_waiter("stack_update_complete").wait(
                StackName=plan.stack_name, WaiterConfig={"Delay": delay_s, "MaxAttempts": 360}
            )
    else:
        cfn.create_stack(**args)
        cfn.get_waiter("stack_create_complete").wait(
            StackName=plan.stack_name, WaiterConfig={"Delay": delay_s, "MaxAttempts": 360}
        )
    stack = cfn.describe_stacks(StackName=plan.stack_name)["Stacks"][0]
    return {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])}


def _stack_exists(cfn: Any, name: str) -> bool:
    try:
        stacks = cfn.describe_stacks(StackName=name)["Stacks"]
    except cfn.exceptions.ClientError as exc:
        if "does not exist" in str(exc):
            return False
        raise
    return any(s["StackStatus"] != "DELETE_COMPLETE" for s in stacks)


def remove(session: Any, region: str, stack_name: str, echo: Callable[[str], None] = print, delay_s: int = 5) -> None:
    """`gpuc watchdog remove`: the stack (functions, URL, schedule, table), the SecureStrings and the code zips
    deploy made. What a watchdog watches is the caller's to judge first: after this nothing reaps its pods."""
    cfn = session.client("cloudformation")
    if _stack_exists(cfn, stack_name):
        cfn.delete_stack(StackName=stack_name)
        cfn.get_waiter("stack_delete_complete").wait(
            StackName=stack_name, WaiterConfig={"Delay": delay_s, "MaxAttempts": 360}
        )
        echo(f"removed the stack {stack_name} (functions, Function URL, schedule, table)")
    else:
        echo(f"no stack {stack_name} in {region}")
    names = [f"{DEFAULT_SSM_PREFIX}/{name}" for name in WATCHDOG_SECRETS]
    ssm = session.client("ssm")
    deleted = [
        gone
        for start in range(0, len(names), SSM_NAMES_PER_CALL)
        for gone in ssm.delete_parameters(Names=names[start : start + SSM_NAMES_PER_CALL]).get("DeletedParameters", [])
    ]
    echo(f"removed {len(deleted)} SecureString parameters under {DEFAULT_SSM_PREFIX}")
    account = session.client("sts").get_caller_identity()["Account"]
    bucket, s3 = f"gpuc-artifacts-{account}-{region}", session.client("s3")
    try:
        listed = s3.list_objects_v2(Bucket=bucket, Prefix="gpuc/watchdog-").get("Contents", [])
    except s3.exceptions.NoSuchBucket:
        return
    for item in listed:
        s3.delete_object(Bucket=bucket, Key=item["Key"])
    echo(f"removed {len(listed)} code zip(s) from s3://{bucket}/gpuc/")
