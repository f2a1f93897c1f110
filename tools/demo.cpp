// kiln demo: builds tensors and runs the seed workloads of the workload list eagerly,
// printing each result (small sizes) in PyTorch's format, then compiles the data-dependent
// branch and prints what the tracer recorded.
#include <kiln/kiln.h>

#include <cmath>
#include <iostream>

using namespace kiln;

int main() {
  try {
    manual_seed(0);
    std::cout << "kiln demo: seed workloads, eager, small sizes\n\n";

    Tensor a = randn({8}), b = randn({8});
    std::cout << "add_sin_cos  (a + b) + sin(a) * cos(b)\n" << (a + b) + sin(a) * cos(b) << "\n\n";

    Tensor x = randn({6});
    std::cout << "poly  pow(x, 2) + x * 3\n" << pow(x, 2) + x * 3 << "\n\n";

    Tensor m = rand({3, 4});
    std::cout << "where_scale  where(x > 0.5, x * 2, x / 2)\n" << where(m > 0.5, m * 2, m / 2) << "\n\n";

    Tensor mat = randn({3, 5}), bias = randn({5});
    std::cout << "broadcast_bias  m + bias\n" << mat + bias << "\n\n";

    Tensor s = randn({4, 4}), y = randn({4, 4});
    std::cout << "transpose_add  x.t() + y\n" << s.t() + y << "\n\n";

    Tensor u = randn({5}), v = randn({5});
    Tensor w = u;
    for (int i = 0; i < 16; ++i) w = w * 0.5 + v;
    std::cout << "unrolled_loop  16 x (x = x * 0.5 + y)\n" << w << "\n\n";

    Tensor ip = randn({6}) * 4;
    ip.add_(1);
    ip.relu_();
    ip.clamp_(0, 6);
    ip.mul_(0.5);
    std::cout << "inplace_chain  add_(1) relu_() clamp_(0, 6) mul_(0.5)\n" << ip << "\n\n";

    Tensor g = randn({6});
    std::cout << "gelu_tanh\n" << 0.5 * g * (1 + tanh(0.7978845608 * (g + 0.044715 * pow(g, 3)))) << "\n\n";

    Tensor t64 = randn({1000}, kFloat64);
    std::cout << "sum_f64  t.sum() over 1000 float64\n" << t64.sum() << "\n\n";

    Tensor r = randn({4, 6});
    std::cout << "row_sum  x.sum(1)\n" << r.sum({1}) << "\n\n";
    std::cout << "softmax  softmax(x, -1)\n" << softmax(r, -1) << "\n\n";
    std::cout << "log_softmax  log_softmax(x, -1)\n" << log_softmax(r, -1) << "\n\n";

    Tensor mean = r.mean({-1}, true), var = r.var({-1}, 0, true);
    Tensor lw = ones({6}), lb = zeros({6});
    std::cout << "layernorm\n" << (r - mean) / sqrt(var + 1e-5) * lw + lb << "\n\n";

    int64_t N = 5;
    double G = 6.67e-11;
    Tensor pos = randn({2, N}), mass = rand({N});
    Tensor diff = pos.unsqueeze(1) - pos.unsqueeze(2);
    Tensor dist = diff.norm(2, {0});
    Tensor forces = G * mass.unsqueeze(1) * mass.unsqueeze(0) / pow(dist, 2);
    std::cout << "nbody_forces\n" << (diff / dist * forces.unsqueeze(0)).nansum({2}) << "\n\n";

    Tensor X = randn({3, 4}), W = randn({4, 2}), bb = randn({2});
    std::cout << "bias_relu  relu(x @ W + b)\n" << relu(matmul(X, W) + bb) << "\n\n";

    Tensor q = randn({1, 2, 3, 4}), k = randn({1, 2, 3, 4});
    std::cout << "attention_scores\n" << softmax(einsum("bhqd,bhkd->bhqk", {q, k}) / std::sqrt(64.0), -1) << "\n\n";

    Tensor bs = randn({10});
    Tensor res = (bs.sum() > 0) ? bs * 2 : bs * -2;
    std::cout << "branch_sign  (sum = " << bs.sum().item<double>() << ")\n" << res << "\n\n";

    Tensor h1 = randn({6}, kBFloat16), h2 = randn({6}, kBFloat16);
    std::cout << "add_sin_cos_bf16\n" << (h1 + h2) + sin(h1) * cos(h2) << "\n\n";

    // The same branch, compiled: traced on the first call of each sign, replayed after.
    auto branch = compile([](const Tensor& t) { return (t.sum() > 0) ? t * 2 : t * -2; });
    for (int i = 0; i < 4; ++i) {
      Tensor in = randn({10}) + (i % 2 ? -1.0 : 1.0);
      Tensor got = branch(in), want = (in.sum() > 0) ? in * 2 : in * -2;
      KILN_CHECK((got == want).all().item<bool>(), "demo", "compiled branch_sign differs from eager");
    }
    std::cout << "compiled branch_sign, 4 calls of both signs, explain():\n" << branch.explain(bs);
  } catch (const kiln::Error& e) {
    std::cerr << "kiln error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
