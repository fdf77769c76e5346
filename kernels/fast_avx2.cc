// The fast CPU kernels compiled for the avx2 instruction set (flags in kernels/CMakeLists.txt).
#define DILOCO_FAST_NS isa_avx2
#define DILOCO_FAST_GETTER Avx2Ops
#define DILOCO_FAST_ISA "avx2"
#include "kernels/fast_impl.inc"
