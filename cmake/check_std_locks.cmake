# Part of the thread-safety check (cmake/thread_safety.cmake), run with cmake -P: fails when a
# product source locks through the standard library's types, which carry no annotations and so
# escape -Wthread-safety. Locks are sundial::Mutex, MutexLock, ReleasableMutexLock and CondVar
# (engine/mutex.h, which alone wraps the standard types); std::unique_lock<Mutex> is allowed
# where a guard must move (Engine::PairLock).
#   -DROOT=<source dir> -DDIRS=<dir;dir...> -DSTAMP=<file touched on success>
set(pattern "std::(mutex|shared_mutex|recursive_mutex|timed_mutex|shared_timed_mutex|condition_variable|lock_guard|scoped_lock|shared_lock)([^a-z_]|$)|std::unique_lock([^<]|<[^M])")
set(found "")
foreach(dir IN LISTS DIRS)
  file(GLOB_RECURSE files ${ROOT}/${dir}/*.h ${ROOT}/${dir}/*.cc)
  foreach(file IN LISTS files)
    if(file MATCHES "/engine/mutex\\.h$|/engine/thread_annotations\\.h$")
      continue()
    endif()
    file(STRINGS ${file} lines REGEX "${pattern}")
    foreach(line IN LISTS lines)
      string(STRIP "${line}" line)
      file(RELATIVE_PATH name ${ROOT} ${file})
      string(APPEND found "  ${name}: ${line}\n")
    endforeach()
  endforeach()
endforeach()
if(found)
  message(FATAL_ERROR "thread_safety: standard lock types, which -Wthread-safety cannot check; "
                      "use engine/mutex.h (docs/testing.md, \"Thread-safety analysis\"):\n${found}")
endif()
file(TOUCH ${STAMP})
