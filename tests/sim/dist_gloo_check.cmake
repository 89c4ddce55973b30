# The gloo headers flatline compiles sim/dist_gloo.cpp against are Debian's libgloo-dev (2022), not the
# gloo built into the wheel's libtorch_cpu.so (docs/DESIGN.md §15, "gloo headers"). That is safe while
# the torch library uses gloo only through torch's exported c10d functions and through pointers; this
# check reads every symbol of libflatline_torch.so (nm, demangled) and fails on what would break it:
#  - any symbol of gloo's own (a name starting "gloo::", its vtable or typeinfo), defined or referenced:
#    a function of Debian's gloo compiled in, or a call into libtorch's gloo with Debian's declarations;
#  - a defined member of c10d::ProcessGroupGloo: an inline function of torch's header compiled here
#    against Debian's gloo, which the dynamic linker could even hand to libtorch in place of its own;
#  - a gloo type anywhere but behind std::shared_ptr / std::unique_ptr (held by value, its layout would
#    be Debian's);
#  - a dependency on Debian's libgloo.so.
# Usage: cmake -DNM=nm -DOBJDUMP=objdump -DLIB=libflatline_torch.so -P dist_gloo_check.cmake
foreach(v NM OBJDUMP LIB)
  if(NOT ${v})
    message(FATAL_ERROR "dist_gloo_check: -D${v}=... is required")
  endif()
endforeach()
execute_process(COMMAND ${NM} -C ${LIB} OUTPUT_VARIABLE syms RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 OR syms STREQUAL "")
  message(FATAL_ERROR "dist_gloo_check: '${NM} -C ${LIB}' failed (${rc}) or printed nothing")
endif()
string(REPLACE ";" "," syms "${syms}")
string(REPLACE "\n" ";" lines "${syms}")
set(bad "")
set(seen 0)
foreach(line IN LISTS lines)
  if(NOT line MATCHES "gloo::|ProcessGroupGloo|libgloo")
    continue()
  endif()
  # "<address> <type> <name>" or "<type> <name>" for an undefined symbol
  if(NOT line MATCHES "^ *([0-9a-f]+ )?([A-Za-z]) (.*)$")
    continue()
  endif()
  set(type "${CMAKE_MATCH_2}")
  set(name "${CMAKE_MATCH_3}")
  math(EXPR seen "${seen} + 1")
  # gloo types behind a smart pointer are layout-free: take them out before looking further
  string(REGEX REPLACE "std::(shared|unique|weak)_ptr<gloo::[A-Za-z0-9_:]+>" "SMART_PTR" stripped "${name}")
  string(REGEX REPLACE "std::default_delete<gloo::[A-Za-z0-9_:]+>" "DELETER" stripped "${stripped}")
  if(name MATCHES "^(vtable for |typeinfo for |typeinfo name for |VTT for )?gloo::")
    list(APPEND bad "${type} ${name}    (a symbol of gloo's own)")
  elseif(NOT type STREQUAL "U" AND name MATCHES "^c10d::ProcessGroupGloo::" AND NOT name MATCHES "^c10d::ProcessGroupGloo::Options::")
    list(APPEND bad "${type} ${name}    (a member of ProcessGroupGloo compiled here)")
  elseif(NOT type STREQUAL "U" AND name MATCHES "^(vtable for |typeinfo for )c10d::ProcessGroupGloo")
    list(APPEND bad "${type} ${name}    (ProcessGroupGloo's vtable or typeinfo compiled here)")
  elseif(stripped MATCHES "gloo::")
    list(APPEND bad "${type} ${name}    (a gloo type held by value)")
  endif()
endforeach()
execute_process(COMMAND ${OBJDUMP} -p ${LIB} OUTPUT_VARIABLE dyn)
if(dyn MATCHES "NEEDED +(libgloo[^\n]*)")
  list(APPEND bad "NEEDED ${CMAKE_MATCH_1}    (Debian's gloo linked in)")
endif()
if(seen EQUAL 0)
  message(FATAL_ERROR "dist_gloo_check: no symbol of ${LIB} names gloo or ProcessGroupGloo: is ProcessGroupGloo still built in?")
endif()
if(bad)
  list(JOIN bad "\n  " text)
  message(FATAL_ERROR "dist_gloo_check: ${LIB} depends on the gloo headers it was compiled with:\n  ${text}")
endif()
message(STATUS "dist_gloo_check: ${seen} symbols of ${LIB} name gloo or ProcessGroupGloo; each is torch's "
               "exported c10d API or holds gloo behind a pointer")
