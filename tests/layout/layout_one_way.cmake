# layout_one_way.cmake: the one-way rule of core/, model/ and text/, read from the sources and
# the built libraries; and no hand-written source in them over 1,000 lines.
#   cmake -DSRC=<source dir> [-DOBJDUMP=objdump -DLIB_CORE=libmemra.so -DLIB_MODEL=libmemra-model.so]
#         -P layout_one_way.cmake
# Fails naming every offending file (exit non-zero), passes silently otherwise.
cmake_minimum_required(VERSION 3.25)
set(problems "")

# The headers each library owns: memra/<name>.h under <lib>/include/memra.
function(headers_of lib out)
  file(GLOB hs RELATIVE "${SRC}/${lib}/include" "${SRC}/${lib}/include/memra/*.h")
  set(${out} "${hs}" PARENT_SCOPE)
endfunction()
headers_of(model model_headers)
headers_of(text text_headers)
if(NOT model_headers OR NOT text_headers)
  message(FATAL_ERROR "no headers found under ${SRC}/model/include or ${SRC}/text/include")
endif()

# lib may not include any of the headers in `above`.
function(check_includes lib above_var above_name)
  file(GLOB_RECURSE files "${SRC}/${lib}/*.c" "${SRC}/${lib}/*.h" "${SRC}/${lib}/*.h.in")
  foreach(f IN LISTS files)
    file(STRINGS "${f}" lines REGEX "^[ \t]*#[ \t]*include[ \t]*[\"<]")
    foreach(line IN LISTS lines)
      foreach(h IN LISTS ${above_var})
        string(FIND "${line}" "${h}" at)
        if(NOT at EQUAL -1)
          file(RELATIVE_PATH rel "${SRC}" "${f}")
          list(APPEND problems "${rel} includes ${h}, a header of ${above_name}/")
        endif()
      endforeach()
    endforeach()
  endforeach()
  set(problems "${problems}" PARENT_SCOPE)
endfunction()
check_includes(core model_headers model)
check_includes(core text_headers text)
check_includes(model text_headers text)

# A shared object may not need a library above it.
if(OBJDUMP)
  foreach(pair "LIB_CORE;libmemra-model" "LIB_CORE;libmemra-text" "LIB_MODEL;libmemra-text")
    list(GET pair 0 var)
    list(GET pair 1 above)
    if(NOT ${var})
      continue()
    endif()
    execute_process(COMMAND ${OBJDUMP} -p ${${var}} OUTPUT_VARIABLE dyn RESULT_VARIABLE rc)
    if(NOT rc EQUAL 0)
      list(APPEND problems "objdump -p ${${var}} failed (${rc})")
    elseif(dyn MATCHES "NEEDED[ \t]+${above}\\.so")
      list(APPEND problems "${${var}} needs ${above}.so")
    endif()
  endforeach()
endif()

# No hand-written source over 1,000 lines (a generated one says so in its first line).
file(GLOB_RECURSE sources "${SRC}/core/*.c" "${SRC}/core/*.h" "${SRC}/model/*.c" "${SRC}/model/*.h"
  "${SRC}/text/*.c" "${SRC}/text/*.h")
foreach(f IN LISTS sources)
  # Newlines counted (file(STRINGS) would skip empty lines).
  file(READ "${f}" body)
  string(REGEX REPLACE "[^\n]" "" nl "${body}")
  string(LENGTH "${nl}" n)
  if(n GREATER 1000)
    file(STRINGS "${f}" first LIMIT_COUNT 1)
    if(NOT first MATCHES "generated")
      file(RELATIVE_PATH rel "${SRC}" "${f}")
      list(APPEND problems "${rel} has ${n} lines (over 1,000: split it by job)")
    endif()
  endif()
endforeach()

if(problems)
  list(JOIN problems "\n  " text)
  message(FATAL_ERROR "layout: the one-way rule or the size rule is broken:\n  ${text}")
endif()
