# Generates the C++ source of a stand-in provider library from its symbol
# list (libmlx5.symbols, libefa.symbols: "<symbol> <node> <returns>").
#
#   cmake -DLIST=<file.symbols> -DOUT=<file.cpp> -P stub_source.cmake
#
# Each function is defined without parameters: the stand-ins never read
# their arguments, and on the x86-64 and AArch64 C ABIs a caller passing
# arguments to a function that ignores them is well defined in practice
# (arguments in registers, caller-cleaned stack).  The return kinds are
# explained in libmlx5.symbols.
cmake_minimum_required(VERSION 3.25)
if(NOT LIST OR NOT OUT)
  message(FATAL_ERROR "usage: cmake -DLIST=<symbols> -DOUT=<cpp> -P stub_source.cmake")
endif()

set(body_ptr "  errno = EOPNOTSUPP;\n  return nullptr;")
set(type_ptr "void*")
set(body_int "  errno = EOPNOTSUPP;\n  return EOPNOTSUPP;")
set(type_int "int")
set(body_fd "  errno = EOPNOTSUPP;\n  return -1;")
set(type_fd "int")
set(body_ssize "  errno = EOPNOTSUPP;\n  return -1;")
set(type_ssize "ssize_t")
set(body_bool "  return false;")
set(type_bool "bool")
set(body_void "")
set(type_void "void")

file(STRINGS "${LIST}" lines)
set(text "// Generated from ${LIST} by stub_source.cmake: do not edit.\n")
string(APPEND text "#include <sys/types.h>\n\n#include <cerrno>\n\n")
string(APPEND text "#define UROCE_STUB extern \"C\" __attribute__((visibility(\"default\")))\n")
foreach(line IN LISTS lines)
  string(REGEX REPLACE "#.*$" "" line "${line}")
  string(STRIP "${line}" line)
  if(line STREQUAL "")
    continue()
  endif()
  string(REGEX REPLACE "[ \t]+" ";" fields "${line}")
  list(LENGTH fields n)
  if(n EQUAL 1)
    continue()  # a node alone
  endif()
  if(NOT n EQUAL 3)
    message(FATAL_ERROR "${LIST}: '${line}' is not '<symbol> <node> <returns>'")
  endif()
  list(GET fields 0 sym)
  list(GET fields 2 kind)
  if(NOT DEFINED type_${kind})
    message(FATAL_ERROR "${LIST}: '${sym}': unknown return kind '${kind}' (ptr, int, fd, ssize, bool, void)")
  endif()
  string(APPEND text "\nUROCE_STUB ${type_${kind}} ${sym}() {\n")
  if(NOT body_${kind} STREQUAL "")
    string(APPEND text "${body_${kind}}\n")
  endif()
  string(APPEND text "}\n")
endforeach()

file(WRITE "${OUT}.tmp" "${text}")
file(COPY_FILE "${OUT}.tmp" "${OUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUT}.tmp")
