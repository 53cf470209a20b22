# ctest's install test (cmake -P): installs the build tree BUILD_DIR into a fresh prefix under
# WORK_DIR, builds tests/install/ (examples/train.cpp as a project of its own) against it with
# find_package(bigbatch), and runs the program. Each step that fails stops the test with its output.
foreach(variable BUILD_DIR WORK_DIR Torch_DIR CXX_COMPILER)
  if(NOT DEFINED ${variable})
    message(FATAL_ERROR "check_install.cmake needs -D${variable}=...")
  endif()
endforeach()

function(run_step what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE code OUTPUT_VARIABLE output
                  ERROR_VARIABLE output)
  if(NOT code EQUAL 0)
    message(FATAL_ERROR "${what} failed (${code}):\n${output}")
  endif()
  set(step_output "${output}" PARENT_SCOPE)
endfunction()

file(REMOVE_RECURSE ${WORK_DIR})
run_step("cmake --install" ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${WORK_DIR}/prefix)
set(launcher "")
if(CXX_COMPILER_LAUNCHER)
  set(launcher -DCMAKE_CXX_COMPILER_LAUNCHER=${CXX_COMPILER_LAUNCHER})
endif()
# As a user would: the install prefix and LibTorch's (torch.utils.cmake_prefix_path for the
# wheel), so that Torch's own dependencies (Caffe2) come from the same LibTorch.
get_filename_component(torch_prefix "${Torch_DIR}/../../.." ABSOLUTE)  # .../torch
# (In the environment, where the list separator is ':': execute_process would split a ';'.)
run_step("configuring a project that finds bigbatch" ${CMAKE_COMMAND} -E env
         CMAKE_PREFIX_PATH=${WORK_DIR}/prefix:${torch_prefix} ${CMAKE_COMMAND}
         -S ${CMAKE_CURRENT_LIST_DIR} -B ${WORK_DIR}/build -DCMAKE_BUILD_TYPE=Release
         -DCMAKE_CXX_COMPILER=${CXX_COMPILER} ${launcher})
run_step("building it" ${CMAKE_COMMAND} --build ${WORK_DIR}/build)
run_step("running it" ${WORK_DIR}/build/train ${WORK_DIR}/run)
if(NOT step_output MATCHES "finished 60 steps")
  message(FATAL_ERROR "the program did not finish its 60 steps:\n${step_output}")
endif()
message(STATUS "${step_output}")
