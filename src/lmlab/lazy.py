"""A package's names imported on first use: importing the package (or a light module in it that the CLI's
parsers read) then loads none of its heavy modules, torch among them. One `__getattr__` for every package
that exports its names so."""

from collections.abc import Callable
from importlib import import_module


def lazy_exports(package: str, exports: dict[str, str]) -> Callable[[str], object]:
    """The module-level `__getattr__` of `package`: a name in `exports` (name -> the module it lives in) comes
    from its module, imported then; any other name is an AttributeError."""

    def __getattr__(name: str) -> object:
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(import_module(exports[name]), name)

    return __getattr__
