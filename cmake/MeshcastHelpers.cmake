# Build helpers shared by every layer: warnings, sanitizers and the per-layer library pattern.

function(meshcast_set_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic)
  if(MESHCAST_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
  # GCC 12 reports -Wrestrict on std::string concatenation at -O2/-O3 inside libstdc++ itself
  # (GCC bug 105651, fixed in 13): a false positive we cannot fix in our code.
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
    target_compile_options(${target} PRIVATE -Wno-restrict)
  endif()
  if(MESHCAST_SANITIZE)
    target_compile_options(${target} PRIVATE -fsanitize=address,undefined -fno-omit-frame-pointer
                                             -fno-sanitize-recover=undefined)
    # With the sanitizers' instrumentation, GCC's maybe-uninitialized analysis reports false
    # positives inside libstdc++ (std::regex's NFA states at -O1); the Release build keeps it.
    if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
      target_compile_options(${target} PRIVATE -Wno-maybe-uninitialized)
    endif()
    target_link_options(${target} PRIVATE -fsanitize=address,undefined)
  endif()
  if(MESHCAST_TSAN)
    target_compile_options(${target} PRIVATE -fsanitize=thread -fno-omit-frame-pointer)
    target_link_options(${target} PRIVATE -fsanitize=thread)
  endif()
endfunction()

# meshcast_add_layer(NAME SOURCES a.cpp ... DEPS other_targets ...)
# One static library per layer (meshcast_<NAME>, alias meshcast::<NAME>), so a layer links only the
# layers above it (docs/concepts.md) and the planner never links MPI or CUDA.
function(meshcast_add_layer name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  set(target meshcast_${name})
  add_library(${target} STATIC ${ARG_SOURCES})
  add_library(meshcast::${name} ALIAS ${target})
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${name} POSITION_INDEPENDENT_CODE ON)
  target_include_directories(${target} PUBLIC
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
    $<BUILD_INTERFACE:${PROJECT_BINARY_DIR}/include>
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  target_compile_features(${target} PUBLIC cxx_std_20)
  target_link_libraries(${target} PUBLIC ${ARG_DEPS})
  meshcast_set_warnings(${target})
  set_property(GLOBAL APPEND PROPERTY MESHCAST_LAYERS ${target})
endfunction()
