# Writes OUTPUT: a C++ source whose function NAMESPACE::FUNCTION() returns the bytes of INPUT as a std::string
# (a text file kept as itself in the tree, built into the program). Run as
#   cmake -DINPUT=... -DOUTPUT=... -DNAMESPACE=... -DFUNCTION=... -P embed_text.cmake
file(READ "${INPUT}" content HEX)
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "'\\\\x\\1'," bytes "${content}")
file(WRITE "${OUTPUT}.tmp"
"// Made from ${INPUT} when it changes (cmake/embed_text.cmake): edit that file, not this one.\n"
"#include <string>\n\n"
"namespace ${NAMESPACE} {\n\n"
"const std::string& ${FUNCTION}() {\n"
"  static const char bytes[] = {${bytes}};\n"
"  static const std::string text(bytes, sizeof bytes);\n"
"  return text;\n"
"}\n\n"
"}  // namespace ${NAMESPACE}\n")
file(COPY_FILE "${OUTPUT}.tmp" "${OUTPUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUTPUT}.tmp")
