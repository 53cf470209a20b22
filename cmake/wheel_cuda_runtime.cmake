# A PyTorch wheel carries the CUDA runtime it was built with (site-packages/nvidia/cu*/lib), which
# may be newer than the machine's toolkit that its CMake config finds for nvcc and the headers.
# Link the wheel's runtime and NVRTC instead of the toolkit's, so that no older copy of them (or of
# NCCL, found beside them) is linked or on the run path. Included after find_package(Torch) by
# bigbatch's build and by its installed package (bigbatchConfig.cmake), for the projects that use
# it.
file(GLOB wheel_cuda_runtime "${TORCH_INSTALL_PREFIX}/../nvidia/cu*/lib/libcudart.so.*")
file(GLOB wheel_nvrtc "${TORCH_INSTALL_PREFIX}/../nvidia/cu*/lib/libnvrtc.so.*")
if(TARGET torch::cudart AND wheel_cuda_runtime AND wheel_nvrtc)
  set_property(TARGET torch::cudart PROPERTY INTERFACE_LINK_LIBRARIES ${wheel_cuda_runtime})
  list(TRANSFORM TORCH_LIBRARIES REPLACE ".*/libnvrtc\\.so$" "${wheel_nvrtc}")
endif()
