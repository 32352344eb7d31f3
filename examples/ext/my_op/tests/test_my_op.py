"""my_op's kernel against torch's own arithmetic, on a GPU (skipped without one)."""

import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.mark.parametrize("n", [0, 1, 255, 256, 257, 1 << 20, (1 << 24) + 3])
def test_axpby_matches_torch(n: int) -> None:
    import my_op

    g = torch.Generator(device="cuda").manual_seed(n)
    x = torch.randn(n, device="cuda", generator=g)
    y = torch.randn(n, device="cuda", generator=g)
    out = my_op.axpby(x, y, 2.5, -0.75)
    torch.testing.assert_close(out, 2.5 * x - 0.75 * y, rtol=1e-6, atol=1e-6)


def test_axpby_non_contiguous_and_2d() -> None:
    import my_op

    x = torch.randn(64, 33, device="cuda").t()
    y = torch.randn(33, 64, device="cuda")
    torch.testing.assert_close(my_op.axpby(x, y, 1.0, 1.0), x + y)


def test_axpby_rejects_cpu_and_wrong_dtype() -> None:
    import my_op

    with pytest.raises(RuntimeError, match="CUDA tensors"):
        my_op.axpby(torch.ones(3), torch.ones(3))
    with pytest.raises(RuntimeError, match="float32"):
        double = torch.ones(3, device="cuda", dtype=torch.float64)
        my_op.axpby(double, double)
