# The CUDA toolkit a build against the PyPI torch wheel compiles with (docs/DESIGN.md §15).
#
# The wheel's LibTorch is built with CUDA 13.0, and its TorchConfig.cmake insists on finding a CUDA
# toolkit (FindCUDA: nvcc, cuda.h, libcudart.so) before it defines any target, even for a program that
# compiles no CUDA code. A plain Debian 12 has none. So the toolkit comes from PyPI as the wheel's own
# libraries do: nvidia-cuda-nvcc, -crt, -nvvm and -cccl (pinned in requirements.txt) install nvcc and
# its headers into the same site-packages/nvidia/cu13 as the runtime, cuBLAS, ... that torch pulls in.
# That directory is not laid out as FindCUDA expects (lib/ holds only versioned libcudart.so.13, ...),
# so this file arranges a toolkit directory of links into it under the build tree:
#
#   build/cuda-toolkit/bin/     nvcc, ptxas, ... -> nvidia/cu13/bin/*, and a copy of nvcc.profile: nvcc
#                               takes the toolkit's root from the profile beside it (TOP = bin/..), and
#                               bin/.. through a link to nvidia/cu13/bin would be nvidia/cu13 itself
#   build/cuda-toolkit/include  -> nvidia/cu13/include
#   build/cuda-toolkit/nvvm     -> nvidia/cu13/nvvm
#   build/cuda-toolkit/lib64/   libX.so and libX.so.N -> nvidia/cu13/lib/libX.so.N, for each library
#
# A machine with /usr/local/cuda builds exactly the same way: the headers and nvcc are those of the
# CUDA release torch was built with, whatever toolkit the machine has. FLATLINE_CUDA (a cache variable):
#   auto    (default) the wheel's toolkit when its nvcc is installed beside torch, else system;
#   wheel   the wheel's toolkit, an error naming the fix when it is not installed;
#   system  CMake finds a toolkit as it always does (CUDA_TOOLKIT_ROOT_DIR, PATH, /usr/local/cuda).
#
# In:  FLATLINE_TORCH_SITE, the site-packages directory of the wheel's torch.
# Out: CUDA_TOOLKIT_ROOT_DIR and CMAKE_CUDA_COMPILER set for TorchConfig.cmake; FLATLINE_CUDA_TOOLKIT,
#      a line saying where the toolkit came from ("PyPI nvidia-cuda-nvcc 13.0.88 (.venv)" or a path).
set(FLATLINE_CUDA "auto" CACHE STRING
    "where the CUDA toolkit comes from: auto | wheel (PyPI, beside torch in .venv) | system (CMake's own search)")
set_property(CACHE FLATLINE_CUDA PROPERTY STRINGS auto wheel system)
if(NOT FLATLINE_CUDA MATCHES "^(auto|wheel|system)$")
  message(FATAL_ERROR "FLATLINE_CUDA=${FLATLINE_CUDA}: expected auto, wheel or system")
endif()

set(FLATLINE_CUDA_TOOLKIT "")
set(_cu "${FLATLINE_TORCH_SITE}/nvidia/cu13")
set(_use_wheel OFF)
if(FLATLINE_TORCH_SITE AND FLATLINE_CUDA STREQUAL "wheel")
  set(_use_wheel ON)
elseif(FLATLINE_TORCH_SITE AND FLATLINE_CUDA STREQUAL "auto" AND EXISTS "${_cu}/bin/nvcc")
  set(_use_wheel ON)
endif()
if(_use_wheel)
  if(NOT EXISTS "${_cu}/bin/nvcc" OR NOT EXISTS "${_cu}/include/cuda_runtime.h")
    message(FATAL_ERROR
      "flatline: no CUDA compiler beside the torch wheel (${_cu}/bin/nvcc): run scripts/setup.sh, which "
      "installs requirements.txt (nvidia-cuda-nvcc and its companions) into .venv/; or configure with "
      "-DFLATLINE_CUDA=system to use an installed CUDA toolkit")
  endif()
  set(_root "${CMAKE_BINARY_DIR}/cuda-toolkit")
  file(REMOVE_RECURSE "${_root}")
  file(MAKE_DIRECTORY "${_root}/lib64" "${_root}/bin")
  foreach(_d include nvvm)
    file(CREATE_LINK "${_cu}/${_d}" "${_root}/${_d}" SYMBOLIC)
  endforeach()
  file(GLOB _bins RELATIVE "${_cu}/bin" "${_cu}/bin/*")
  foreach(_f ${_bins})
    if(_f STREQUAL "nvcc.profile")
      file(COPY "${_cu}/bin/${_f}" DESTINATION "${_root}/bin")
    else()
      file(CREATE_LINK "${_cu}/bin/${_f}" "${_root}/bin/${_f}" SYMBOLIC)
    endif()
  endforeach()
  file(GLOB _libs RELATIVE "${_cu}/lib" "${_cu}/lib/lib*.so*" "${_cu}/lib/lib*.a")
  foreach(_f ${_libs})
    file(CREATE_LINK "${_cu}/lib/${_f}" "${_root}/lib64/${_f}" SYMBOLIC)
    if(_f MATCHES "^(lib.+)\\.so\\.[0-9.]+$")  # libcudart.so.13 -> also libcudart.so, what find_library wants
      if(NOT EXISTS "${_root}/lib64/${CMAKE_MATCH_1}.so")
        file(CREATE_LINK "${_cu}/lib/${_f}" "${_root}/lib64/${CMAKE_MATCH_1}.so" SYMBOLIC)
      endif()
    endif()
  endforeach()
  # Every earlier answer of FindCUDA/FindCUDAToolkit (a toolkit found before, in another place) goes.
  foreach(_v CUDA_TOOLKIT_ROOT_DIR CMAKE_CUDA_COMPILER CUDA_NVCC_EXECUTABLE CUDA_INCLUDE_DIRS CUDA_CUDART_LIBRARY
             CUDA_TOOLKIT_INCLUDE)
    unset(${_v} CACHE)
  endforeach()
  set(CUDA_TOOLKIT_ROOT_DIR "${_root}" CACHE PATH "the CUDA toolkit (cmake/cuda_from_wheel.cmake)" FORCE)
  set(CMAKE_CUDA_COMPILER "${_root}/bin/nvcc" CACHE FILEPATH "nvcc (cmake/cuda_from_wheel.cmake)" FORCE)
  execute_process(COMMAND "${FLATLINE_PYTHON}" -c
                  "import importlib.metadata as m; print(m.version('nvidia-cuda-nvcc'))"
                  OUTPUT_VARIABLE _v OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  set(FLATLINE_CUDA_TOOLKIT "PyPI nvidia-cuda-nvcc ${_v}")
endif()
