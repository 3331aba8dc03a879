# example_op.cmake (run by ctest with cmake -P): the README's "Writing an op plugin" on
# examples/op-rmsnorm (the op plugin `example`), built out of tree with find_package(memra)
# against memra's build tree: `memra plugins` lists it loaded with what it serves, memra-gate
# runs cpu against cpu:op.rmsnorm=example and passes exact (it keeps the built-in's order), and
# the protocol record names the plugin's file and digest.
foreach(v MEMRA_BUILD_DIR EXAMPLE_DIR WORK_DIR C_COMPILER GENERATOR)
  if(NOT ${v})
    message(FATAL_ERROR "example_op.cmake: -D${v}=... is required")
  endif()
endforeach()

function(run name)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  message(STATUS "[${name}] ${out}")
  if(NOT rc EQUAL 0)
    string(REPLACE ";" " " cmd "${ARGN}")
    message(FATAL_ERROR "example_op: step '${name}' failed (${rc}): ${cmd}")
  endif()
  set(RUN_OUTPUT "${out}" PARENT_SCOPE)
endfunction()

function(expect what text pattern)
  if(NOT "${text}" MATCHES "${pattern}")
    message(FATAL_ERROR "example_op: ${what}: no match for '${pattern}'")
  endif()
endfunction()

file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})
set(build ${WORK_DIR}/example-build)
set(bin ${MEMRA_BUILD_DIR}/bin)

# 1. find_package(memra) through CMAKE_PREFIX_PATH; build the example (its cpu flavour: the cuda
#    one is built where a CUDA compiler is found, and checked on a GPU by bench/gpu/ops.sh).
run(configure ${CMAKE_COMMAND} -S ${EXAMPLE_DIR} -B ${build} -G ${GENERATOR} -DCMAKE_C_COMPILER=${C_COMPILER}
    -DCMAKE_PREFIX_PATH=${MEMRA_BUILD_DIR} -DCMAKE_BUILD_TYPE=RelWithDebInfo -DEXAMPLE_CUDA=OFF
    "-DCMAKE_C_FLAGS=${EXTRA_FLAGS}" "-DCMAKE_MODULE_LINKER_FLAGS=${EXTRA_FLAGS}")
run(build ${CMAKE_COMMAND} --build ${build})
foreach(f example.op.manifest libmemra-op-example.so)
  if(NOT EXISTS ${build}/plugins.d/${f})
    message(FATAL_ERROR "example_op: ${build}/plugins.d/${f} was not built")
  endif()
endforeach()

# 2. memra plugins finds and loads it (exit 0) and says what it serves.
run(plugins ${CMAKE_COMMAND} -E env MEMRA_PLUGIN_PATH=${build}/plugins.d ${bin}/memra plugins)
expect("memra plugins" "${RUN_OUTPUT}" "\nexample +op +0\\.1\\.0 +ok +${build}/plugins.d/libmemra-op-example\\.so\n")
expect("memra plugins" "${RUN_OUTPUT}" "\n +serves: cpu rmsnorm\n")

# 3. The gate: exact against the built-in RMSNorm, and the record names the plugin.
run(gate ${CMAKE_COMMAND} -E env MEMRA_PLUGIN_PATH=${build}/plugins.d ${bin}/memra-gate --a cpu
    --b cpu:op.rmsnorm=example --compare exact --prime 8 --gen 8 --rows 2 --jsonl ${WORK_DIR}/gate.jsonl)
file(READ ${WORK_DIR}/gate.jsonl records)
expect("memra-gate's records" "${records}" "\"record\":\"verdict\"[^\n]*\"pass\":true")
file(SHA256 ${build}/plugins.d/libmemra-op-example.so sha)
expect("the protocol record" "${records}"
  "\"name\":\"example\",\"kind\":\"op\",\"version\":\"0\\.1\\.0\",\"path\":\"[^\"]*libmemra-op-example\\.so\",\"sha256\":\"${sha}\"")
message(STATUS "example_op: passed")
