"""The Python spellings that reach an operator.

For an ``aten`` op of native_functions.yaml (``torch`` stands for every package of the
harness, plus ``torch`` itself):

- ``variants: function`` -> ``torch.<name>``; ``variants: method`` -> ``torch.Tensor.<name>``;
- ``python_module: nn`` -> ``torch._C._nn.<name>`` and ``torch.nn.functional.<name>``;
  ``linalg`` / ``special`` / ``fft`` / ``sparse`` / ``nested`` -> ``torch._C._<module>.<name>``
  and ``torch.<module>.<name without the module prefix>`` (``linalg_vector_norm`` ->
  ``torch.linalg.vector_norm``);
- always ``torch.ops.aten.<name>`` (the overload packet) and
  ``torch.ops.aten.<name>.<overload>`` (``default`` for the default overload).

A TORCH_LIBRARY op ``ns::name`` is ``torch.ops.ns.name`` (and ``.<overload>``).
"""

from __future__ import annotations

from collections.abc import Iterable

# python_module -> the public module its functions appear in (relative to the package).
_PUBLIC_MODULES = {
    "nn": "nn.functional",
    "linalg": "linalg",
    "special": "special",
    "fft": "fft",
    "sparse": "sparse",
    "nested": "nested",
}


def packages_with_torch(packages: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(["torch", *packages]))


def ops_names(packages: Iterable[str], namespace: str, name: str, overload: str) -> list[str]:
    """``torch.ops.<ns>.<name>`` and ``torch.ops.<ns>.<name>.<overload|default>``."""
    names = []
    for package in packages:
        base = f"{package}.ops.{namespace}.{name}"
        names.extend([base, f"{base}.{overload or 'default'}"])
    return names


def aten_python_names(
    packages: Iterable[str],
    name: str,
    overload: str,
    variants: Iterable[str],
    python_module: str | None,
) -> list[str]:
    packages = packages_with_torch(packages)
    variant_set = set(variants)
    names: list[str] = []
    for package in packages:
        if "function" in variant_set:
            if python_module:
                names.append(f"{package}._C._{python_module}.{name}")
                public = _PUBLIC_MODULES.get(python_module)
                if public and not name.startswith("_"):
                    prefix = f"{python_module}_"
                    short = name[len(prefix) :] if name.startswith(prefix) else name
                    names.append(f"{package}.{public}.{short}")
            else:
                names.append(f"{package}.{name}")
        if "method" in variant_set:
            names.append(f"{package}.Tensor.{name}")
    names.extend(ops_names(packages, "aten", name, overload))
    return list(dict.fromkeys(names))
