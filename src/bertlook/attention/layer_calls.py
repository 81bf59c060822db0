"""Which layer a call of a module belongs to, also where one module serves several layers (ALBERT's shared layers).

A reader of the model's inside (attention capture, value vectors, value zeroing, head ablation) hooks one module per
layer and must know, in the hook, which layer it is called for. Most models have a module per layer: layer ``i``'s
hook is ``i``'s. ALBERT shares its layers (``albert-base-v2``: ONE ``AlbertLayer``, ``num_hidden_groups = 1``, run
for every one of the 12 layers): the one module is hooked once, and its ``j``-th call within a forward pass of the
model is the ``j``-th of the layers that use it, in layer order (:class:`CallOrder`: a per-forward call counter per
module, reset by a forward pre-hook on the model). A forward pass that calls a shared module a number of times other
than the number of layers that use it is a :class:`BertlookError` (at the extra call, or at the end of the pass).

:func:`layer_hooks` registers ``hook(layer, module, args, [kwargs,] output)`` the one way or the other: one hook per
module and layer where no module is shared (exactly as before: what a BERT or a decoder computes is unchanged), by
call order where one is. torch is not imported here (the hooks are registered on the modules given).

Definitions: docs/definitions.md#supported-layouts
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator, Sequence

from bertlook.errors import BertlookError


def _key(obj: Any) -> int:
    """The identity of a hookable object: a torch module's own; a wrapper's (``norms.ValueTap``, not a module) that
    of the module it wraps (``.module``)."""
    if hasattr(obj, "_modules") or not hasattr(obj, "module"):  # a torch.nn.Module (never unwrapped), or no wrapper
        return id(obj)
    return id(obj.module)


def is_shared(per_layer: Sequence[Any]) -> bool:
    """Whether one module serves more than one layer of ``per_layer`` (the module of each layer, in order)."""
    return len({_key(m) for m in per_layer}) < len(per_layer)


def forward_root(model):
    """The module whose forward pass runs the layers once: ``model.base_model`` (a wrapper with a head calls it), else
    ``model`` itself."""
    base = getattr(model, "base_model", None)
    return base if base is not None else model


class CallOrder:
    """Per forward pass, the layer of each call of the modules of ``per_layer`` (``per_layer[i]``: layer ``i``'s):
    :meth:`layer` gives the layer of a module's next call; :meth:`reset` starts a forward pass; :meth:`check` that
    every module was called once per layer that uses it. ``what`` names the reader in the errors."""

    def __init__(self, per_layer: Sequence[Any], what: str) -> None:
        self.what = what
        self.layers: dict[int, list[int]] = {}  # module identity -> the layers that call it, in order
        for i, module in enumerate(per_layer):
            self.layers.setdefault(_key(module), []).append(i)
        self.calls = dict.fromkeys(self.layers, 0)  # module identity -> calls in this forward pass

    def reset(self) -> None:
        self.calls = dict.fromkeys(self.layers, 0)

    def layer(self, module: Any) -> int:
        """The layer of this call of ``module`` (its ``j``-th call in the forward pass: the ``j``-th layer using it)."""
        key = _key(module)
        used_by, j = self.layers[key], self.calls[key]
        if j >= len(used_by):
            raise BertlookError(f"{self.what}: a module shared by layers {_ones(used_by)} was called {j + 1} times in "
                                f"one forward pass (once per layer expected): the layer of each call is not known")
        self.calls[key] = j + 1
        return used_by[j]

    def check(self) -> None:
        for key, used_by in self.layers.items():
            if self.calls[key] != len(used_by):
                raise BertlookError(f"{self.what}: a module shared by layers {_ones(used_by)} was called "
                                    f"{self.calls[key]} times in one forward pass, expected {len(used_by)} (once per "
                                    "layer): the layer of each call is not known")


def _ones(layers: Sequence[int]) -> str:
    """1-based layer numbers, shortened: ``1-12`` for a run, else a list."""
    nums = [i + 1 for i in layers]
    if nums == list(range(nums[0], nums[-1] + 1)) and len(nums) > 2:
        return f"{nums[0]}-{nums[-1]}"
    return ", ".join(str(n) for n in nums)


@contextlib.contextmanager
def per_forward(model, order: CallOrder) -> Iterator[CallOrder]:
    """Within the block, ``order`` is reset before each forward pass of ``model`` (:func:`forward_root`) and checked
    after it."""
    root = forward_root(model)
    handles = [root.register_forward_pre_hook(lambda _m, _args: order.reset()),
               root.register_forward_hook(lambda _m, _args, _out: order.check())]
    try:
        yield order
    finally:
        for h in handles:
            h.remove()


@contextlib.contextmanager
def layer_hooks(model, per_layer: Sequence[Any], hook: Callable[..., Any], *, what: str, pre: bool = False,
                with_kwargs: bool = False) -> Iterator[None]:
    """Within the block, every call of layer ``i``'s module ``per_layer[i]`` calls ``hook(i, module, args, output)``
    (``pre``: a forward pre-hook, ``hook(i, module, args)``; ``with_kwargs``: with the call's keyword arguments after
    ``args``); what ``hook`` returns is the hook's return (torch's rules). Where no module is shared: one hook per
    layer on its module (``model`` not used; a ``norms.ValueTap`` is hooked through its own
    ``register_forward_hook``); where one is: one hook per module, its call's layer by :class:`CallOrder` (``model``:
    the model whose forward passes run the layers; ``what``: the reader, in the errors). Hooks removed on exit."""
    handles = []

    def register(module, fn):
        if pre:
            return module.register_forward_pre_hook(fn, with_kwargs=with_kwargs)
        if with_kwargs:
            return module.register_forward_hook(fn, with_kwargs=True)
        return module.register_forward_hook(fn)

    try:
        if not is_shared(per_layer):
            for i, module in enumerate(per_layer):
                handles.append(register(module, lambda *a, i=i: hook(i, *a)))
            yield
            return
        if model is None:
            raise BertlookError(f"{what}: modules shared by several layers are read by call order, which needs the "
                                "model (its forward passes)")
        order = CallOrder(per_layer, what)
        with per_forward(model, order):
            seen: set[int] = set()
            for module in per_layer:
                if _key(module) not in seen:
                    seen.add(_key(module))
                    handles.append(register(module, lambda m, *a, module=module: hook(order.layer(module), m, *a)))
            yield
    finally:
        for h in handles:
            h.remove()
