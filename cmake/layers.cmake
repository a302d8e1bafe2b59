# The layering the build enforces. Each top-level folder X has an include root of its own,
# ${LOOM_INCLUDE_ROOTS}/X, holding one link X -> the source folder, and an INTERFACE target
# loom_X_api that puts that root (and X's generated headers) on the include path together with
# the api targets X's headers may include. A library of X compiles with its own api and the apis
# of the folders it may use, and nothing else: `#include "Y/..."` from X fails to compile unless
# Y is one of them. No library target adds ${CMAKE_SOURCE_DIR} to the include path; only tests,
# benchmarks and the Python module, which may include anything, do (through loom_all_api).
set(LOOM_INCLUDE_ROOTS ${CMAKE_BINARY_DIR}/include_roots)
set(LOOM_GENERATED ${CMAKE_BINARY_DIR}/generated)

# loom_folder_api(FOLDER [USES api...] [GENERATED dir...])
function(loom_folder_api folder)
  cmake_parse_arguments(ARG "" "" "USES;GENERATED" ${ARGN})
  set(root ${LOOM_INCLUDE_ROOTS}/${folder})
  file(MAKE_DIRECTORY ${root})
  if(NOT EXISTS ${root}/${folder})
    file(CREATE_LINK ${CMAKE_SOURCE_DIR}/${folder} ${root}/${folder} SYMBOLIC)
  endif()
  add_library(loom_${folder}_api INTERFACE)
  target_include_directories(loom_${folder}_api INTERFACE ${root} ${ARG_GENERATED})
  if(ARG_USES)
    target_link_libraries(loom_${folder}_api INTERFACE ${ARG_USES})
  endif()
endfunction()

# Generated headers: "loom/config.h" (build options as macros) lives in a root of its own.
add_library(loom_config_api INTERFACE)
target_include_directories(loom_config_api INTERFACE ${LOOM_GENERATED}/config)

# The arrows of docs/ARCHITECTURE.md ("Folders and what each may include"). What a folder's
# *headers* include is listed under USES (and so reaches every user of the folder); what only
# its sources use is linked PRIVATE by its library (see each folder's CMakeLists.txt).
loom_folder_api(base)
loom_folder_api(collective USES loom_base_api)
loom_folder_api(rpc USES loom_base_api GENERATED ${LOOM_GENERATED}/rpc)
loom_folder_api(framework USES loom_base_api loom_collective_api loom_config_api
                GENERATED ${LOOM_GENERATED}/framework)
loom_folder_api(executor USES loom_framework_api)
loom_folder_api(operators USES loom_framework_api loom_collective_api loom_rpc_api loom_kvstore_api)
loom_folder_api(kvstore USES loom_framework_api loom_collective_api loom_rpc_api)
loom_folder_api(transpiler USES loom_framework_api loom_collective_api)
loom_folder_api(runtime USES loom_framework_api loom_executor_api loom_collective_api)
loom_folder_api(sim USES loom_collective_api)
loom_folder_api(tools USES loom_framework_api loom_executor_api loom_collective_api loom_rpc_api
                loom_kvstore_api loom_transpiler_api loom_runtime_api loom_sim_api)

# Tests, benchmarks and the Python module reach every folder.
add_library(loom_all_api INTERFACE)
target_include_directories(loom_all_api INTERFACE ${CMAKE_SOURCE_DIR})
target_link_libraries(loom_all_api INTERFACE loom_base_api loom_collective_api loom_rpc_api
                      loom_framework_api loom_executor_api loom_operators_api loom_kvstore_api
                      loom_transpiler_api loom_runtime_api loom_sim_api loom_tools_api)
