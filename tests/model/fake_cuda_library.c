/* A shared library standing in for a CUDA library in cuda_loader_test: the loader must find it
 * in a Python package folder (nvidia/<wheel>/lib) and resolve its symbols. */
int diloco_fake_cuda_symbol(void) { return 42; }
