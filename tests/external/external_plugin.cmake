# external_plugin.cmake (run by ctest with cmake -P): install memra, build a lab's plugin out of
# tree against the install, and load it through the installed libmemra. Every step that fails
# stops the test with what it ran and what it printed.
foreach(v MEMRA_BUILD_DIR PROJECT_DIR WORK_DIR LIBDIR C_COMPILER GENERATOR)
  if(NOT ${v})
    message(FATAL_ERROR "external_plugin.cmake: -D${v}=... is required")
  endif()
endforeach()

# run(NAME cmd...): runs a command, shows its output, stops on failure; output in RUN_OUTPUT.
function(run name)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  message(STATUS "[${name}] ${out}")
  if(NOT rc EQUAL 0)
    string(REPLACE ";" " " cmd "${ARGN}")
    message(FATAL_ERROR "external_plugin: step '${name}' failed (${rc}): ${cmd}")
  endif()
  set(RUN_OUTPUT "${out}" PARENT_SCOPE)
endfunction()

function(expect_file path)
  if(NOT EXISTS "${path}")
    message(FATAL_ERROR "external_plugin: ${path} was not installed")
  endif()
endfunction()

set(prefix ${WORK_DIR}/prefix)    # memra, installed
set(lab ${WORK_DIR}/lab)          # the lab's plugin, installed in its own prefix
set(build ${WORK_DIR}/build)      # the lab's build tree
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})

# 1. Install memra.
run(install ${CMAKE_COMMAND} --install ${MEMRA_BUILD_DIR} --prefix ${prefix})
foreach(f include/memra/plugin.h include/memra/registry.h include/memra/version.h
          ${LIBDIR}/cmake/memra/memraConfig.cmake ${LIBDIR}/cmake/memra/MemraPlugin.cmake
          ${LIBDIR}/pkgconfig/memra.pc ${LIBDIR}/libmemra.so)
  expect_file(${prefix}/${f})
endforeach()

# 2. Configure, build and install the lab's project against it (find_package(memra)).
run(configure ${CMAKE_COMMAND} -S ${PROJECT_DIR} -B ${build} -G ${GENERATOR}
    -DCMAKE_C_COMPILER=${C_COMPILER} -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_INSTALL_PREFIX=${lab}
    -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_C_FLAGS=${EXTRA_FLAGS}"
    "-DCMAKE_EXE_LINKER_FLAGS=${EXTRA_FLAGS}" "-DCMAKE_MODULE_LINKER_FLAGS=${EXTRA_FLAGS}")
run(build ${CMAKE_COMMAND} --build ${build})
expect_file(${build}/plugins.d/labsampler.sampler.manifest)
run(install-lab ${CMAKE_COMMAND} --install ${build})
set(lab_plugins ${lab}/${LIBDIR}/memra/plugins.d)
expect_file(${lab_plugins}/labsampler.sampler.manifest)
expect_file(${lab_plugins}/libmemra-sampler-labsampler.so)

# 3. Load it through the installed libmemra, found through MEMRA_PLUGIN_PATH.
run(load ${CMAKE_COMMAND} -E env MEMRA_PLUGIN_PATH=${lab_plugins} ${build}/lab-loader ${prefix})
foreach(want "searched: ${lab_plugins}" "searched: ${prefix}/${LIBDIR}/memra/plugins.d"
             "loaded: sampler labsampler 0.1.0 from ${lab_plugins}/libmemra-sampler-labsampler.so"
             "log 2 labsampler: ready" "lab-loader: ok")
  string(FIND "${RUN_OUTPUT}" "${want}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "external_plugin: the loader's output lacks '${want}'")
  endif()
endforeach()

# 4. Without MEMRA_PLUGIN_PATH the lab's plugin is not found, and the message says where memra
#    looked: explicit loading, no guessing.
execute_process(COMMAND ${CMAKE_COMMAND} -E env --unset=MEMRA_PLUGIN_PATH ${build}/lab-loader ${prefix}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(rc EQUAL 0 OR NOT out MATCHES "no sampler plugin named 'labsampler'; searched: ${prefix}/${LIBDIR}/memra/plugins.d")
  message(FATAL_ERROR "external_plugin: without MEMRA_PLUGIN_PATH the loader should fail to find labsampler; got (${rc}): ${out}")
endif()

# 5. The lab's plugin installed into memra's own prefix is found with no path at all.
file(COPY ${lab_plugins}/labsampler.sampler.manifest ${lab_plugins}/libmemra-sampler-labsampler.so
     DESTINATION ${prefix}/${LIBDIR}/memra/plugins.d)
run(load-from-prefix ${CMAKE_COMMAND} -E env --unset=MEMRA_PLUGIN_PATH ${build}/lab-loader ${prefix})
if(NOT RUN_OUTPUT MATCHES "loaded: sampler labsampler 0.1.0 from ${prefix}/${LIBDIR}/memra/plugins.d/")
  message(FATAL_ERROR "external_plugin: the plugin in memra's prefix was not the one loaded")
endif()

# 6. pkg-config: the flags point into the prefix, and a program built with them runs.
if(NOT PKG_CONFIG)
  message(FATAL_ERROR "external_plugin: pkg-config not found (install pkg-config)")
endif()
set(ENV{PKG_CONFIG_PATH} ${prefix}/${LIBDIR}/pkgconfig)
run(pkg-config ${PKG_CONFIG} --cflags --libs memra)
string(STRIP "${RUN_OUTPUT}" pc_flags)
separate_arguments(pc_flags UNIX_COMMAND "${pc_flags}")
run(pkg-config-prefix ${PKG_CONFIG} --variable=prefix memra)
string(STRIP "${RUN_OUTPUT}" pc_prefix)
get_filename_component(pc_prefix "${pc_prefix}" REALPATH)
get_filename_component(real_prefix "${prefix}" REALPATH)
if(NOT pc_prefix STREQUAL real_prefix)
  message(FATAL_ERROR "external_plugin: memra.pc says prefix ${pc_prefix}, installed at ${real_prefix}")
endif()
if(NOT "${pc_flags}" MATCHES "-lmemra")
  message(FATAL_ERROR "external_plugin: pkg-config --libs lacks -lmemra: ${pc_flags}")
endif()
separate_arguments(extra UNIX_COMMAND "${EXTRA_FLAGS}")
run(pkg-config-build ${C_COMPILER} -std=c11 -D_GNU_SOURCE ${extra} ${PROJECT_DIR}/lab_loader.c ${pc_flags}
    -Wl,-rpath,${prefix}/${LIBDIR} -ldl -o ${WORK_DIR}/lab-loader-pc)
run(pkg-config-load ${CMAKE_COMMAND} -E env MEMRA_PLUGIN_PATH=${lab_plugins} ${WORK_DIR}/lab-loader-pc ${prefix})
message(STATUS "external_plugin: passed")
