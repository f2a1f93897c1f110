#include <kiln/kiln.h>
#include <iostream>
int main() { std::cout << kiln::arange(4).view({2, 2}).t().contiguous() << "\n"; }
