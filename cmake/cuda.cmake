# The CUDA toolkit for gpu/cuda: the runtime and cuBLAS through find_package(CUDAToolkit), never the
# driver library (libcuda is absent where no GPU is; the runtime loads it when it is there).
# CMAKE_CUDA_ARCHITECTURES defaults to 80;90 (set before project()); pass -DCMAKE_CUDA_ARCHITECTURES=...
# to change it.

find_package(CUDAToolkit REQUIRED)
# The CUDA sources are C++20, like the rest. CMake 3.25 does not know nvcc's C++20 flag (nvcc has it
# since 12.0): tell it.
if(NOT DEFINED CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
  set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
  set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
endif()
set(CMAKE_CUDA_STANDARD 20)
set(CMAKE_CUDA_STANDARD_REQUIRED ON)
set(CMAKE_CUDA_EXTENSIONS OFF)
