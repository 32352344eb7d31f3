// Python binding and argument checks of my_op; the kernel itself is in my_op_kernel.cu.
#include <torch/extension.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

void axpby_launch(const float* x, const float* y, float* out, float a, float b, int64_t n, cudaStream_t stream);

torch::Tensor axpby(const torch::Tensor& x, const torch::Tensor& y, double a, double b) {
    TORCH_CHECK(x.is_cuda() && y.is_cuda(), "my_op.axpby: x and y must be CUDA tensors");
    TORCH_CHECK(x.scalar_type() == torch::kFloat && y.scalar_type() == torch::kFloat,
                "my_op.axpby: x and y must be float32");
    TORCH_CHECK(x.sizes() == y.sizes(), "my_op.axpby: x and y must have the same shape");
    TORCH_CHECK(x.device() == y.device(), "my_op.axpby: x and y must be on the same device");
    const c10::cuda::CUDAGuard guard(x.device());
    auto xc = x.contiguous();
    auto yc = y.contiguous();
    auto out = torch::empty_like(xc);
    axpby_launch(xc.data_ptr<float>(), yc.data_ptr<float>(), out.data_ptr<float>(), static_cast<float>(a),
                 static_cast<float>(b), xc.numel(), c10::cuda::getCurrentCUDAStream());
    return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("axpby", &axpby, "out = a * x + b * y (float32, CUDA)", py::arg("x"), py::arg("y"), py::arg("a"),
          py::arg("b"));
}
