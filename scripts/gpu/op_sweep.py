"""Run a fixed sweep of CUDA ops and save every result, so two torch copies can be compared bit for bit.

    python3 scripts/gpu/op_sweep.py run OUT.pt          # with the torch on PYTHONPATH
    python3 scripts/gpu/op_sweep.py compare A.pt B.pt   # prints one JSON line per op and a summary

Used by scripts/gpu/prune_on_gpu.sh: the unpruned torch and a copy pruned by ``kiln prune`` must
give identical bytes for every op (GEMMs in four dtypes, cuDNN convolutions and RNNs, SDPA through
each backend, FFT, linear algebra, sorting, RNG, a fused AdamW step and a backward pass...).
Deterministic settings make the comparison meaningful: the same algorithm is chosen in both runs.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")


def ops() -> dict[str, Callable[[], object]]:
    import torch
    import torch.nn.functional as F

    dev = "cuda"

    def g(seed: int) -> torch.Generator:
        return torch.Generator(device=dev).manual_seed(seed)

    def r(*shape: int, dtype: torch.dtype = torch.float32, seed: int = 0) -> torch.Tensor:
        return torch.randn(*shape, device=dev, generator=g(seed)).to(dtype)

    def sdpa(backend: str, dtype: torch.dtype) -> Callable[[], object]:
        def run() -> object:
            from torch.nn.attention import SDPBackend, sdpa_kernel

            q, k, v = (r(2, 8, 256, 64, dtype=dtype, seed=s) for s in (1, 2, 3))
            with sdpa_kernel(getattr(SDPBackend, backend)):
                return F.scaled_dot_product_attention(q, k, v, is_causal=True)

        return run

    def adamw() -> object:
        torch.manual_seed(0)
        m = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 10)).to(dev)
        opt = torch.optim.AdamW(m.parameters(), lr=1e-3, fused=True)
        x = r(64, 256, seed=5)
        y = torch.randint(0, 10, (64,), device=dev, generator=g(6))
        for _ in range(3):
            opt.zero_grad()
            F.cross_entropy(m(x), y).backward()
            opt.step()
        return torch.cat([p.detach().flatten() for p in m.parameters()])

    def backward() -> object:
        torch.manual_seed(1)
        conv = torch.nn.Conv2d(3, 16, 3, padding=1).to(dev)
        x = r(4, 3, 32, 32, seed=7).requires_grad_()
        out = F.relu(conv(x)).mean()
        out.backward()
        return [x.grad, conv.weight.grad, conv.bias.grad]

    def rnn(kind: str) -> Callable[[], object]:
        def run() -> object:
            torch.manual_seed(2)
            m = getattr(torch.nn, kind)(32, 64, num_layers=2, batch_first=True).to(dev)
            return m(r(4, 10, 32, seed=8))[0]

        return run

    def scaled_mm() -> object:
        a = r(256, 512, seed=9).to(torch.float8_e4m3fn)
        b = r(256, 512, seed=10).to(torch.float8_e4m3fn).t()
        one = torch.tensor(1.0, device=dev)
        return torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)

    spd = lambda: (lambda a: a @ a.T + 64 * torch.eye(64, device=dev))(r(64, 64, seed=11))  # noqa: E731
    out: dict[str, Callable[[], object]] = {
        "matmul_fp32": lambda: r(512, 512) @ r(512, 512, seed=1),
        "matmul_tf32": lambda: torch.backends.cuda.matmul.__setattr__("allow_tf32", True)
        or (r(512, 512) @ r(512, 512, seed=1)),
        "matmul_bf16": lambda: r(1024, 1024, dtype=torch.bfloat16) @ r(1024, 1024, dtype=torch.bfloat16, seed=1),
        "matmul_fp16": lambda: r(1024, 1024, dtype=torch.float16) @ r(1024, 1024, dtype=torch.float16, seed=1),
        "matmul_fp64": lambda: r(256, 256, dtype=torch.float64) @ r(256, 256, dtype=torch.float64, seed=1),
        "bmm_bf16": lambda: torch.bmm(r(8, 128, 64, dtype=torch.bfloat16), r(8, 64, 128, dtype=torch.bfloat16, seed=1)),
        "addmm": lambda: torch.addmm(r(256), r(128, 64), r(64, 256, seed=1)),
        "linear_gelu": lambda: F.gelu(F.linear(r(64, 128), r(256, 128, seed=1), r(256, seed=2))),
        "scaled_mm_fp8": scaled_mm,
        "conv1d": lambda: F.conv1d(r(4, 8, 100), r(16, 8, 5, seed=1), padding=2),
        "conv2d": lambda: F.conv2d(r(4, 3, 64, 64), r(16, 3, 3, 3, seed=1), padding=1),
        "conv2d_bf16": lambda: F.conv2d(r(4, 16, 32, 32, dtype=torch.bfloat16), r(32, 16, 3, 3, dtype=torch.bfloat16, seed=1)),
        "conv2d_depthwise": lambda: F.conv2d(r(2, 32, 28, 28), r(32, 1, 3, 3, seed=1), groups=32),
        "conv3d": lambda: F.conv3d(r(2, 4, 16, 16, 16), r(8, 4, 3, 3, 3, seed=1)),
        "conv_transpose2d": lambda: F.conv_transpose2d(r(2, 16, 16, 16), r(16, 8, 4, 4, seed=1), stride=2),
        "max_pool2d": lambda: F.max_pool2d(r(4, 8, 32, 32), 2),
        "avg_pool2d": lambda: F.avg_pool2d(r(4, 8, 32, 32), 3, stride=2),
        "adaptive_avg_pool2d": lambda: F.adaptive_avg_pool2d(r(4, 8, 33, 31), (7, 7)),
        "batch_norm": lambda: F.batch_norm(r(16, 32, 8, 8), None, None, training=True),
        "layer_norm": lambda: F.layer_norm(r(64, 768), (768,)),
        "group_norm": lambda: F.group_norm(r(8, 32, 16, 16), 8),
        "rms_norm": lambda: F.rms_norm(r(64, 512), (512,)),
        "softmax": lambda: F.softmax(r(128, 1000), -1),
        "log_softmax_bf16": lambda: F.log_softmax(r(128, 1000, dtype=torch.bfloat16), -1),
        "cross_entropy": lambda: F.cross_entropy(r(64, 100), torch.arange(64, device=dev) % 100),
        "sdpa_math": sdpa("MATH", torch.float32),
        "sdpa_flash_bf16": sdpa("FLASH_ATTENTION", torch.bfloat16),
        "sdpa_efficient_fp16": sdpa("EFFICIENT_ATTENTION", torch.float16),
        "sdpa_cudnn_bf16": sdpa("CUDNN_ATTENTION", torch.bfloat16),
        "fft": lambda: torch.fft.fft(r(4096).to(torch.complex64)),
        "rfft2": lambda: torch.fft.rfft2(r(64, 128)),
        "irfft": lambda: torch.fft.irfft(torch.fft.rfft(r(1000))),
        "linalg_solve": lambda: torch.linalg.solve(spd(), r(64, 8, seed=12)),
        "cholesky": lambda: torch.linalg.cholesky(spd()),
        "qr": lambda: torch.linalg.qr(r(64, 32)),
        "eigh": lambda: torch.linalg.eigh(spd()),
        "svd": lambda: torch.linalg.svd(r(48, 32)),
        "inv": lambda: torch.linalg.inv(spd()),
        "det": lambda: torch.linalg.det(spd()),
        "lstsq": lambda: torch.linalg.lstsq(r(64, 16), r(64, 4, seed=1)).solution,
        "sort": lambda: torch.sort(r(100000)),
        "topk": lambda: torch.topk(r(1000, 100), 5),
        "unique": lambda: torch.unique(torch.randint(0, 100, (10000,), device=dev, generator=g(3)), return_counts=True),
        "argsort_int": lambda: torch.argsort(torch.randint(0, 1000, (5000,), device=dev, generator=g(4)), stable=True),
        "cumsum": lambda: torch.cumsum(r(10000), 0),
        "scatter_add": lambda: torch.zeros(100, device=dev).scatter_add(0, torch.arange(1000, device=dev) % 100, r(1000)),
        "gather": lambda: torch.gather(r(100, 50), 1, torch.arange(100 * 10, device=dev).view(100, 10) % 50),
        "index_select": lambda: torch.index_select(r(1000, 16), 0, torch.arange(0, 1000, 7, device=dev)),
        "index_add": lambda: torch.zeros(10, 4, device=dev).index_add(0, torch.arange(20, device=dev) % 10, r(20, 4)),
        "embedding": lambda: F.embedding(torch.arange(64, device=dev) % 50, r(50, 32)),
        "embedding_bag": lambda: F.embedding_bag(torch.arange(64, device=dev) % 50, r(50, 32),
                                                 torch.arange(0, 64, 8, device=dev)),
        "rand": lambda: torch.rand(1000, device=dev, generator=g(20)),
        "randn": lambda: torch.randn(1000, device=dev, generator=g(21)),
        "randint": lambda: torch.randint(0, 10**6, (1000,), device=dev, generator=g(22)),
        "dropout": lambda: (torch.manual_seed(23), F.dropout(r(1000), 0.5, training=True))[1],
        "multinomial": lambda: torch.multinomial(torch.ones(100, device=dev), 50, generator=g(24)),
        "elementwise": lambda: [f(r(10000)) for f in (torch.exp, torch.sin, torch.tanh, torch.sigmoid, torch.erf)]
        + [torch.log(r(10000).abs() + 1), r(1000).pow(3)],
        "elementwise_bf16": lambda: [f(r(10000, dtype=torch.bfloat16)) for f in (torch.exp, F.silu, F.gelu)],
        "reductions": lambda: [f(r(1000, 100), 1) for f in (torch.sum, torch.mean, torch.std, torch.var, torch.amax)]
        + [torch.linalg.vector_norm(r(10000))],
        "where_masked": lambda: torch.where(r(1000) > 0, r(1000, seed=1), r(1000, seed=2)).masked_fill(r(1000) > 1, 0),
        "cat_stack": lambda: [torch.cat([r(10, 5), r(10, 5, seed=1)]), torch.stack([r(3), r(3, seed=1)])],
        "interpolate_bilinear": lambda: F.interpolate(r(2, 3, 32, 32), scale_factor=2.5, mode="bilinear"),
        "interpolate_nearest": lambda: F.interpolate(r(2, 3, 32, 32), size=(17, 45), mode="nearest"),
        "grid_sample": lambda: F.grid_sample(r(2, 3, 16, 16), r(2, 8, 8, 2, seed=1).tanh(), align_corners=False),
        "lstm": rnn("LSTM"),
        "gru": rnn("GRU"),
        "histc": lambda: torch.histc(r(10000), bins=50, min=-3, max=3),
        "bincount": lambda: torch.bincount(torch.randint(0, 50, (1000,), device=dev, generator=g(25))),
        "kthvalue_median": lambda: [torch.kthvalue(r(100, 50), 10, 1), torch.median(r(1001))],
        "nonzero": lambda: torch.nonzero(r(100, 100) > 1),
        "adamw_fused": adamw,
        "backward_conv": backward,
        "mlp_backward_bf16": lambda: (lambda w: (torch.tanh(r(32, 64, dtype=torch.bfloat16) @ w).sum().backward(), w.grad)[1])(
            r(64, 64, dtype=torch.bfloat16, seed=3).requires_grad_()),
        "cdist": lambda: torch.cdist(r(100, 16), r(80, 16, seed=1)),
        "einsum": lambda: torch.einsum("bij,bjk->bik", r(4, 32, 16), r(4, 16, 8, seed=1)),
        "triu_tril": lambda: [torch.triu(r(50, 50)), torch.tril(r(50, 50), -1)],
        "clamp_round": lambda: [torch.clamp(r(1000), -0.5, 0.5), torch.round(r(1000) * 10)],
        "prod_logsumexp": lambda: [torch.prod(r(20, 10) * 0.1 + 1, 1), torch.logsumexp(r(100, 100), 1)],
        "complex_mul": lambda: torch.view_as_complex(r(500, 2)) * torch.view_as_complex(r(500, 2, seed=1)),
        "pad_reflect": lambda: F.pad(r(2, 3, 10, 10), (2, 2, 2, 2), mode="reflect"),
        "pixel_shuffle": lambda: F.pixel_shuffle(r(1, 16, 8, 8), 2),
        "one_hot": lambda: F.one_hot(torch.arange(50, device=dev) % 10),
    }
    return out


def flatten(value: object) -> list[object]:
    import torch

    if isinstance(value, torch.Tensor):
        return [value.detach().cpu()]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in flatten(v)]
    if hasattr(value, "_fields"):  # named tuples (torch.return_types)
        return flatten(tuple(value))
    return [value]


def run(path: str) -> None:
    import torch

    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    results: dict[str, object] = {"__torch__": torch.__file__, "__device__": torch.cuda.get_device_name(0)}
    for name, fn in ops().items():
        try:
            results[name] = flatten(fn())
            torch.cuda.synchronize()
        except Exception as e:  # noqa: BLE001 - an op that fails must fail the same way in both copies
            results[name] = f"error: {type(e).__name__}: {str(e).splitlines()[0][:200]}"
    torch.save(results, path)
    print(json.dumps({"torch": torch.__file__, "ops": len(results) - 2,
                      "errors": sum(isinstance(v, str) for k, v in results.items() if not k.startswith("__"))}))


def same(a: object, b: object) -> bool:
    import torch

    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        if a.dtype != b.dtype or a.shape != b.shape:
            return False
        x, y = a.contiguous().flatten(), b.contiguous().flatten()
        if x.is_complex():
            x, y = torch.view_as_real(x).flatten(), torch.view_as_real(y).flatten()
        if x.dtype == torch.bool:
            return torch.equal(x, y)
        return torch.equal(x.view(torch.uint8), y.view(torch.uint8))
    return a == b


def compare(a_path: str, b_path: str) -> int:
    import torch

    a, b = torch.load(a_path, weights_only=False), torch.load(b_path, weights_only=False)
    names = [k for k in a if not k.startswith("__")]
    bad = 0
    for k in names:
        va, vb = a[k], b.get(k)
        ok = isinstance(va, list) and isinstance(vb, list) and len(va) == len(vb) and all(map(same, va, vb))
        if isinstance(va, str) or isinstance(vb, str):
            ok = va == vb
        bad += not ok
        print(json.dumps({"op": k, "identical": ok, "error": va if isinstance(va, str) else None}))
    errors = sum(isinstance(a[k], str) for k in names)
    print(json.dumps({"summary": True, "ops": len(names), "identical": len(names) - bad, "different": bad,
                      "failed_in_both": errors, "a": a["__torch__"], "b": b["__torch__"], "device": a["__device__"]}))
    return 1 if bad else 0


if __name__ == "__main__":
    if sys.argv[1] == "run":
        run(sys.argv[2])
    else:
        sys.exit(compare(sys.argv[2], sys.argv[3]))
