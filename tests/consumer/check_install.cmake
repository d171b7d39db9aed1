# Installs the build into a fresh prefix, then configures, builds and runs the
# consumer project against it with nothing but CMAKE_PREFIX_PATH.
# Invoked by CTest: cmake -DBUILD_DIR=<build> -DWORK_DIR=<dir> -DGENERATOR=<gen>
#   -DCXX_COMPILER=<c++> -P check_install.cmake
file(REMOVE_RECURSE "${WORK_DIR}")
set(prefix "${WORK_DIR}/prefix")

# step(<what> command...): runs the command, fails the test with its output.
function(step what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc}):\n${out}\n${err}")
  endif()
  message(STATUS "ok: ${what}")
endfunction()

step("cmake --install" "${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${prefix}")
step("consumer configure" "${CMAKE_COMMAND}" -S "${CMAKE_CURRENT_LIST_DIR}" -B "${WORK_DIR}/build"
     -G "${GENERATOR}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=${CXX_COMPILER}
     -DCMAKE_PREFIX_PATH=${prefix})
step("consumer build" "${CMAKE_COMMAND}" --build "${WORK_DIR}/build")
step("consumer run" "${WORK_DIR}/build/consumer")
