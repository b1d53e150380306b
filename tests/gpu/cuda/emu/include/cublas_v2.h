#pragma once
// Stub of the CUDA header of this name for the CPU emulation (see ../emu_runtime.hpp).
#include "../emu_runtime.hpp"
