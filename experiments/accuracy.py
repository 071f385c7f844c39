"""Accuracy of one cell: relative L2 errors of o, lse and the gradients against a float64 reference.

The reference is kernels.reference.attention_reference run on float64 copies of the same inputs;
its gradients come from float64 autograd. err(x) = ||x - x_ref|| / ||x_ref||. The log-sum-exp is
compared for `ours` only (the other providers do not return it). Runs wherever the provider runs:
on the GPU, or on the CPU through Triton's interpreter.
"""
import torch

from experiments import providers


def relative_error(x: torch.Tensor, reference: torch.Tensor) -> float:
    x, reference = x.detach().double(), reference.detach().double()
    return float((x - reference).norm() / reference.norm())


def errors(cell, device: torch.device) -> dict:
    from kernels.reference import attention_reference

    attend = providers.attention(cell, device)
    q, k, v, do = providers.inputs(cell, device)
    exact = [x.detach().double().requires_grad_() for x in (q, k, v)]
    o_ref, lse_ref = attention_reference(*exact, causal=cell.causal)
    grads_ref = torch.autograd.grad(o_ref, exact, do.double())

    if cell.provider == "ours":
        o, lse = attend(q, k, v, return_lse=True)
    else:
        o, lse = attend(q, k, v), None
    grads = torch.autograd.grad(o, (q, k, v), do)
    result = dict(err_o=relative_error(o, o_ref), err_lse=relative_error(lse, lse_ref) if lse is not None else None)
    for name, grad, grad_ref in zip(("err_dq", "err_dk", "err_dv"), grads, grads_ref):
        result[name] = relative_error(grad, grad_ref)
    return result
