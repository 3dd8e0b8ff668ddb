# The thread-safety check (docs/testing.md, "Thread-safety analysis"): the target
# `thread_safety` compiles every C++ source of the given targets with clang++ -fsyntax-only
# -Wthread-safety -Werror, with each target's include directories and definitions, so that the
# GUARDED_BY / REQUIRES / EXCLUDES annotations (engine/thread_annotations.h) are checked
# whatever compiler builds the product, and that no product source locks through the standard
# library's unannotated types (check_std_locks.cmake). Nothing is generated or linked: a source
# is checked again only when it or a header it includes changed (a stamp and a depfile each).
# `make test` builds it (Makefile: test-thread-safety).
find_program(SUNDIAL_CLANGXX NAMES clang++ clang++-14)

function(sundial_thread_safety_check)
  if(NOT SUNDIAL_CLANGXX)
    add_custom_target(thread_safety
      COMMAND ${CMAKE_COMMAND} -E echo "thread_safety: no clang++ (scripts/deps.sh installs clang)"
      COMMAND ${CMAKE_COMMAND} -E false)
    return()
  endif()
  set(out_dir ${CMAKE_BINARY_DIR}/thread_safety)
  set(stamps "")
  foreach(target IN LISTS ARGN)
    get_target_property(source_dir ${target} SOURCE_DIR)
    get_target_property(sources ${target} SOURCES)
    # The target's include directories and definitions, its dependencies' included; the
    # system's directory stays a system directory (as -I, its headers' warnings would count).
    set(includes "$<TARGET_PROPERTY:${target},INCLUDE_DIRECTORIES>")
    set(includes "$<REMOVE_DUPLICATES:$<FILTER:${includes},EXCLUDE,^/usr/include/?$>>")
    set(definitions "$<TARGET_PROPERTY:${target},COMPILE_DEFINITIONS>")
    # One argument a line, quoted: a definition may hold quotes (SUNDIAL_VERSION="0.1.0").
    string(CONCAT flags "$<$<BOOL:${includes}>:'-I$<JOIN:${includes},'\n'-I>'>\n"
           "$<$<BOOL:${definitions}>:'-D$<JOIN:${definitions},'\n'-D>'>\n")
    file(GENERATE OUTPUT ${out_dir}/${target}.flags CONTENT "${flags}")
    foreach(source IN LISTS sources)
      if(NOT source MATCHES "\\.cc$")
        continue()
      endif()
      cmake_path(ABSOLUTE_PATH source BASE_DIRECTORY ${source_dir})
      cmake_path(IS_PREFIX PROJECT_BINARY_DIR ${source} generated)
      if(generated)  # generated code (the embedded dashboard) has no locks
        continue()
      endif()
      cmake_path(RELATIVE_PATH source BASE_DIRECTORY ${PROJECT_SOURCE_DIR} OUTPUT_VARIABLE name)
      set(stamp ${out_dir}/${name}.stamp)
      add_custom_command(
        OUTPUT ${stamp}
        COMMAND ${SUNDIAL_CLANGXX} -std=c++20 -fsyntax-only -Wall -Wextra -Werror -Wthread-safety
                -DNDEBUG @${out_dir}/${target}.flags -MD -MF ${stamp}.d -MT ${stamp} ${source}
        COMMAND ${CMAKE_COMMAND} -E touch ${stamp}
        DEPENDS ${source} ${out_dir}/${target}.flags
        DEPFILE ${stamp}.d
        COMMENT "clang -Wthread-safety ${name}"
        VERBATIM)
      list(APPEND stamps ${stamp})
    endforeach()
  endforeach()
  # And no lock of the standard library's, which the analysis cannot see (check_std_locks.cmake).
  set(dirs engine wal protocol server client replication tools)
  set(patterns "")
  foreach(dir IN LISTS dirs)
    list(APPEND patterns ${PROJECT_SOURCE_DIR}/${dir}/*.h ${PROJECT_SOURCE_DIR}/${dir}/*.cc)
  endforeach()
  file(GLOB_RECURSE files CONFIGURE_DEPENDS ${patterns})
  set(stamp ${out_dir}/std_locks.stamp)
  add_custom_command(
    OUTPUT ${stamp}
    COMMAND ${CMAKE_COMMAND} -DROOT=${PROJECT_SOURCE_DIR} "-DDIRS=${dirs}" -DSTAMP=${stamp}
            -P ${PROJECT_SOURCE_DIR}/cmake/check_std_locks.cmake
    DEPENDS ${files} ${PROJECT_SOURCE_DIR}/cmake/check_std_locks.cmake
    COMMENT "No standard lock types in the product's sources"
    VERBATIM)
  list(APPEND stamps ${stamp})
  add_custom_target(thread_safety DEPENDS ${stamps})
endfunction()
