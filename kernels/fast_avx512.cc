// The fast CPU kernels compiled for the avx512 instruction set (flags in kernels/CMakeLists.txt).
#define DILOCO_FAST_NS isa_avx512
#define DILOCO_FAST_GETTER Avx512Ops
#define DILOCO_FAST_ISA "avx512"
#include "kernels/fast_impl.inc"
