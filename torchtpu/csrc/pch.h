// The torch headers the binding's files share, precompiled once per build (Makefile:
// BIND_PCH) and given to every file first with -include. Not included by any file: each
// still includes what it uses, so the build without it (setup.py) is the same program.
// Python's header first: it must precede the standard headers.
#include <torch/csrc/utils/pybind.h>
#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>
