#!/usr/bin/env bash
# What travels to the GPU machine with PROGRAMs: every shared library they load (ldd) that the
# machine does not have of its own, one "name path" line each, sorted. The machine has its own
# glibc, newer than Debian 12's 2.36 (2.39): no part of glibc's family may travel, since a
# library of it found first through LD_LIBRARY_PATH (libresolv, pulled in by libzmq through
# krb5, imports GLIBC_PRIVATE symbols) keeps the programs from starting there. Nor the compiler
# runtime (gcc 13 there, newer than ours), nor the CUDA driver and libraries of the same major
# version (13). benchmarks/gpu/prepare.sh copies what this prints; bundle_libs_test.sh checks it
# against the packages that own glibc and the compiler runtime.
# Usage: benchmarks/gpu/bundle_libs.sh PROGRAM...
set -euo pipefail
(($# > 0)) || { echo "usage: $0 PROGRAM..." >&2; exit 2; }
# glibc's family (Debian's libc6: the loader, libc, libm, libmvec, libdl, librt, libpthread,
# libresolv, libnsl, libutil, libanl, libBrokenLocale, libthread_db, libnss_*, and the debugging
# preloads), the compiler runtime, and CUDA's own libraries.
glibc='ld-linux[^.]*|libc|libm|libmvec|libdl|librt|libpthread|libresolv|libnsl|libutil|libanl'
glibc+='|libBrokenLocale|libthread_db|libnss_[a-z]+|libc_malloc_debug|libmemusage|libpcprofile'
system="^(linux-vdso|$glibc|libgcc_s|libstdc\\+\\+|libcuda|libcudart|libcublas|libcublasLt|libnccl)\\."
for p in "$@"; do
  [[ -x $p ]] || { echo "bundle_libs: $p is not an executable" >&2; exit 2; }
  ldd "$p" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r name path; do
  if [[ ! $name =~ $system ]]; then echo "$name $path"; fi
done
