# example_backend.cmake (run by ctest with cmake -P): the README's plugin guide, step by step, on
# examples/backend-minimal (the backend `mylab`). MODE=installed: `cmake --install` memra into a
# temporary prefix, configure the example with CMAKE_PREFIX_PATH=prefix, and check pkg-config
# with PKG_CONFIG_PATH=prefix/lib/pkgconfig; MODE=build-tree: the same with CMAKE_PREFIX_PATH and
# PKG_CONFIG_PATH set to memra's build tree itself. Either way the example is built, `memra
# plugins` with MEMRA_PLUGIN_PATH=example/plugins.d lists it loaded (exit 0), and memra-gate runs
# cpu against mylab (exit 0: mylab computes through cpu, bit for bit).
foreach(v MODE MEMRA_BUILD_DIR EXAMPLE_DIR WORK_DIR LIBDIR BINDIR C_COMPILER GENERATOR PKG_CONFIG)
  if(NOT ${v})
    message(FATAL_ERROR "example_backend.cmake: -D${v}=... is required")
  endif()
endforeach()

function(run name)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  message(STATUS "[${name}] ${out}")
  if(NOT rc EQUAL 0)
    string(REPLACE ";" " " cmd "${ARGN}")
    message(FATAL_ERROR "example_backend (${MODE}): step '${name}' failed (${rc}): ${cmd}")
  endif()
  set(RUN_OUTPUT "${out}" PARENT_SCOPE)
endfunction()

function(expect what text pattern)
  if(NOT "${text}" MATCHES "${pattern}")
    message(FATAL_ERROR "example_backend (${MODE}): ${what}: no match for '${pattern}'")
  endif()
endfunction()

file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})
set(build ${WORK_DIR}/mylab-build)
if(MODE STREQUAL "installed")
  set(prefix ${WORK_DIR}/prefix)
  run(install ${CMAKE_COMMAND} --install ${MEMRA_BUILD_DIR} --prefix ${prefix})
  set(package ${prefix})
  set(pc_path ${prefix}/${LIBDIR}/pkgconfig)
  set(bin ${prefix}/${BINDIR})
elseif(MODE STREQUAL "build-tree")
  set(package ${MEMRA_BUILD_DIR})
  set(pc_path ${MEMRA_BUILD_DIR})
  set(bin ${MEMRA_BUILD_DIR}/bin)
else()
  message(FATAL_ERROR "example_backend.cmake: MODE is installed or build-tree, not '${MODE}'")
endif()

# 1. find_package(memra) through CMAKE_PREFIX_PATH, as the README says; build the example.
run(configure ${CMAKE_COMMAND} -S ${EXAMPLE_DIR} -B ${build} -G ${GENERATOR} -DCMAKE_C_COMPILER=${C_COMPILER}
    -DCMAKE_PREFIX_PATH=${package} -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_C_FLAGS=${EXTRA_FLAGS}"
    "-DCMAKE_MODULE_LINKER_FLAGS=${EXTRA_FLAGS}")
run(build ${CMAKE_COMMAND} --build ${build})
foreach(f mylab.backend.manifest libmemra-backend-mylab.so)
  if(NOT EXISTS ${build}/plugins.d/${f})
    message(FATAL_ERROR "example_backend (${MODE}): ${build}/plugins.d/${f} was not built")
  endif()
endforeach()

# 2. memra plugins finds and loads it (exit 0), with its keys.
run(plugins ${CMAKE_COMMAND} -E env MEMRA_PLUGIN_PATH=${build}/plugins.d ${bin}/memra plugins)
expect("memra plugins" "${RUN_OUTPUT}" "\nmylab +backend +0\\.1\\.0 +ok +${build}/plugins.d/libmemra-backend-mylab\\.so\n")
expect("memra plugins" "${RUN_OUTPUT}" " 0 failed to load")

# 3. It runs: a gate of cpu against mylab passes.
run(gate ${CMAKE_COMMAND} -E env MEMRA_PLUGIN_PATH=${build}/plugins.d ${bin}/memra-gate --a cpu --b mylab
    --prime 4 --gen 4 --rows 2 --jsonl ${WORK_DIR}/gate.jsonl)
file(READ ${WORK_DIR}/gate.jsonl records)
expect("memra-gate's records" "${records}" "\"record\":\"verdict\"[^\n]*\"pass\":true")

# 4. pkg-config memra through PKG_CONFIG_PATH, as the README says: a program built with its
#    flags includes the headers and runs against libmemra.
set(ENV{PKG_CONFIG_PATH} ${pc_path})
run(pkg-config ${PKG_CONFIG} --cflags --libs memra)
string(STRIP "${RUN_OUTPUT}" pc_flags)
separate_arguments(pc_flags UNIX_COMMAND "${pc_flags}")
run(pkg-config-libdir ${PKG_CONFIG} --variable=libdir memra)
string(STRIP "${RUN_OUTPUT}" pc_libdir)
file(WRITE ${WORK_DIR}/probe.c "#include <stdio.h>\n#include <string.h>\n#include <memra/plugin.h>\n#include <memra/version.h>\n"
  "int main(void) { printf(\"%s\\n\", memra_plugin_kind_name(MEMRA_PLUGIN_BACKEND)); "
  "return strcmp(memra_plugin_kind_name(MEMRA_PLUGIN_BACKEND), \"backend\") != 0; }\n")
separate_arguments(extra UNIX_COMMAND "${EXTRA_FLAGS}")
run(pkg-config-build ${C_COMPILER} -std=c11 ${extra} ${WORK_DIR}/probe.c ${pc_flags} -Wl,-rpath,${pc_libdir}
    -o ${WORK_DIR}/probe)
run(pkg-config-run ${WORK_DIR}/probe)
message(STATUS "example_backend (${MODE}): passed")
