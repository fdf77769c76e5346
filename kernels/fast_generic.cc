// The fast CPU kernels compiled for the generic instruction set (flags in kernels/CMakeLists.txt).
#define DILOCO_FAST_NS isa_generic
#define DILOCO_FAST_GETTER GenericOps
#define DILOCO_FAST_ISA "generic"
#include "kernels/fast_impl.inc"
