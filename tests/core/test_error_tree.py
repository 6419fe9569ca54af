"""The exception tree drawn in core/errors.py is the code's: every exception class of the product is in it."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import gpuc
from gpuc.core import errors

PRODUCT = ("gpuc.core", "gpuc.client", "gpuc.functions", "gpuc.instance_side")


def product_exceptions() -> dict[str, str]:
    found: dict[str, str] = {}
    for package_name in PRODUCT:
        package = importlib.import_module(package_name)
        for info in pkgutil.walk_packages(package.__path__, prefix=f"{package_name}."):
            if info.name.endswith("__main__"):
                continue
            module = importlib.import_module(info.name)
            for name, obj in vars(module).items():
                if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == info.name:
                    found[name] = info.name
    return found


def test_every_exception_class_of_the_product_is_drawn_in_the_tree() -> None:
    drawing = errors.__doc__ or ""
    missing = {name: where for name, where in product_exceptions().items() if name not in drawing}
    assert missing == {}, f"draw these in core/errors.py: {missing}"


def drawn_classes() -> set[str]:
    """The class names at the start of each line of the drawing ("├── SshError   (client.ssh) ...")."""
    names: set[str] = set()
    for line in (errors.__doc__ or "").splitlines():
        head = line.lstrip("│├└─ ").split("  ")[0].strip()
        names.update(n.strip() for n in head.split(",") if n.strip().lstrip("_")[:1].isupper())
    return {n for n in names if n.isidentifier()}


def test_the_tree_draws_no_class_that_does_not_exist() -> None:
    known = set(product_exceptions()) | {"SshdUnavailable", "S3Unavailable"}
    assert drawn_classes() - known == set()


def test_user_facing_errors_derive_from_gpuc_error() -> None:
    assert gpuc.__version__
    for name in ("SshError", "ProvisionError", "PodVerificationFailed", "DeployError", "GraphQLError"):
        where = product_exceptions()[name]
        cls = getattr(importlib.import_module(where), name)
        assert issubclass(cls, errors.GpucError), name
