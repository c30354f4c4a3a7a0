# Included by the top-level CMakeLists.txt in the sanitizer builds (NSBOX_SANITIZE,
# NSBOX_FUZZ), once every target exists. docs/design.md, "Build and tests", says why.

# What runs inside the sandbox is built as a release builds it: nsbox-init static and
# unsanitized, nsbox-kernel unsanitized. ASan reserves terabytes of shadow memory at start,
# which the RLIMIT_AS of a sandbox without cgroups (rootless) refuses; a dynamic init would
# load its libraries from the sandbox's view of the host; and the sanitized kernel would be
# CPython's allocator under ASan in a cgroup sized for the user's data. So init gets its own
# unsanitized copy of the two libraries it uses.
get_target_property(nsbox_sys_sources nsbox_sys SOURCES)
get_target_property(nsbox_protocol_sources nsbox_protocol SOURCES)
add_library(nsbox_protocol_unsanitized STATIC ${nsbox_sys_sources} ${nsbox_protocol_sources})
target_include_directories(nsbox_protocol_unsanitized PUBLIC ${CMAKE_SOURCE_DIR})
target_link_libraries(nsbox_protocol_unsanitized PUBLIC nlohmann_json::nlohmann_json)
set_property(TARGET nsbox-init PROPERTY LINK_LIBRARIES nsbox_protocol_unsanitized -static)
# nsbox-archive runs inside sandboxes too (fs:extract, docs/design.md "Snapshots"): built the same way,
# from its own unsanitized copy of what it links. Its archive code stays under the
# sanitizers in the unit tests and the snapshot_archive fuzz target.
get_target_property(nsbox_archive_sources nsbox_archive SOURCES)
add_library(nsbox_archive_unsanitized STATIC ${nsbox_archive_sources} ${nsbox_sys_sources} mounts/volume_image.cc)
target_include_directories(nsbox_archive_unsanitized PUBLIC ${CMAKE_SOURCE_DIR} ${LIBARCHIVE_INCLUDE_DIRS})
target_link_libraries(nsbox_archive_unsanitized PUBLIC nlohmann_json::nlohmann_json ${LIBARCHIVE_LIBRARIES} nettle pthread)
set_property(TARGET nsbox-archive PROPERTY LINK_LIBRARIES nsbox_archive_unsanitized)
foreach(target nsbox_protocol_unsanitized nsbox-init nsbox-kernel nsbox_archive_unsanitized nsbox-archive)
  get_target_property(options ${target} COMPILE_OPTIONS)
  list(REMOVE_ITEM options ${NSBOX_SANITIZER_OPTIONS})
  set_target_properties(${target} PROPERTIES COMPILE_OPTIONS "${options}" LINK_OPTIONS "")
endforeach()

# Every host-side program writes its reports to one directory (tests/fuzz/
# sanitizer_defaults.cc): a supervisor or a bucket server runs detached, with its stderr
# in a log that goes with the sandbox, and a report there would be lost.
set(NSBOX_SANITIZER_REPORTS ${CMAKE_BINARY_DIR}/sanitizer-reports)
get_property(top_targets DIRECTORY ${CMAKE_SOURCE_DIR} PROPERTY BUILDSYSTEM_TARGETS)
get_property(test_targets DIRECTORY ${CMAKE_SOURCE_DIR}/tests PROPERTY BUILDSYSTEM_TARGETS)
foreach(target ${top_targets} ${test_targets})
  get_target_property(type ${target} TYPE)
  if(type STREQUAL "EXECUTABLE" AND NOT target MATCHES "^(nsbox-init|nsbox-kernel|nsbox-archive|nsbox-probe)$")
    target_sources(${target} PRIVATE ${CMAKE_CURRENT_LIST_DIR}/sanitizer_defaults.cc)
    target_compile_definitions(${target} PRIVATE NSBOX_SANITIZER_REPORTS="${NSBOX_SANITIZER_REPORTS}")
  endif()
endforeach()
