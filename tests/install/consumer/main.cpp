#include <kiln/kiln.h>

#include <iostream>

// Eager ops, and a compiled function (the frontend, the passes and the CPU backend, each
// library finding the next from where it is installed).
int main() {
  std::cout << kiln::arange(4).view({2, 2}).t().contiguous() << "\n";
  auto f = kiln::compile([](const kiln::Tensor& x) { return x * 2 + 1; });
  std::cout << "compiled " << f(kiln::arange(3).to(kiln::kFloat32)) << "\n";
}
