// A C++ function that throws, reached through a cxx bridge the way the MLX
// shim reaches MLX: cxx catches the exception at the language boundary and
// turns it into an Err on the Rust side.
#pragma once
#include "rust/cxx.h"

void throw_runtime_error(rust::Str what);
