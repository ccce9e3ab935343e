# One static library per layer. A layer may link only layers of a lower rank, so the link graph
# itself shows (and enforces) that dependencies point down. Layers of equal rank (the CPU and
# CUDA backends) may not see each other.
set(FP4_LAYER_RANKS core=0 formats=1 kvcache=2 backend=3 backend_cpu=4 backend_cuda=4 model=5
    tokenizer=5 sampling=5 chat=5 scheduler=6 engine=7 server=8 tools=9)

function(fp4_layer_rank layer out)
  foreach(entry ${FP4_LAYER_RANKS})
    string(REPLACE "=" ";" kv ${entry})
    list(GET kv 0 k)
    list(GET kv 1 v)
    if(k STREQUAL layer)
      set(${out} ${v} PARENT_SCOPE)
      return()
    endif()
  endforeach()
  message(FATAL_ERROR "unknown layer '${layer}'")
endfunction()

# fp4_add_layer(<layer> [SOURCES ...] [DEPENDS <lower layers>] [EXTERNAL <imported targets>])
# creates the static library fp4_<layer> (an INTERFACE library when the layer is header-only).
function(fp4_add_layer layer)
  cmake_parse_arguments(L "" "" "SOURCES;DEPENDS;EXTERNAL" ${ARGN})
  fp4_layer_rank(${layer} rank)
  set(deps)
  foreach(dep ${L_DEPENDS})
    fp4_layer_rank(${dep} dep_rank)
    if(NOT dep_rank LESS rank)
      message(FATAL_ERROR "layer '${layer}' may not depend on '${dep}': dependencies point down")
    endif()
    list(APPEND deps fp4_${dep})
  endforeach()
  if(L_SOURCES)
    add_library(fp4_${layer} STATIC ${L_SOURCES})
    set(scope PUBLIC)
  else()  # a header-only layer
    add_library(fp4_${layer} INTERFACE)
    set(scope INTERFACE)
  endif()
  target_include_directories(fp4_${layer} ${scope} ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(fp4_${layer} ${scope} ${deps} ${L_EXTERNAL})
endfunction()
