# The hardware profiles of profiles/ compiled into memtrain_lib (src/forecast/shipped_profiles.h), so the binary
# plans from any directory; regenerated when a profile changes, and on reconfiguring when one is added.
file(GLOB MEMTRAIN_PROFILES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/profiles/*.json)
set(MEMTRAIN_PROFILES_CPP ${PROJECT_BINARY_DIR}/generated/shipped_profile_files.cpp)
add_custom_command(
  OUTPUT ${MEMTRAIN_PROFILES_CPP}
  COMMAND ${CMAKE_COMMAND} "-DPROFILES=${MEMTRAIN_PROFILES}" -DSOURCE_DIR=${PROJECT_SOURCE_DIR}
          -DOUT=${MEMTRAIN_PROFILES_CPP} -P ${PROJECT_SOURCE_DIR}/cmake/embed_profiles.cmake
  DEPENDS ${MEMTRAIN_PROFILES} ${PROJECT_SOURCE_DIR}/cmake/embed_profiles.cmake
  COMMENT "Embedding the hardware profiles of profiles/"
  VERBATIM)
target_sources(memtrain_lib PRIVATE ${MEMTRAIN_PROFILES_CPP})
# Installed beside the binary as files too (share/memtrain/profiles): the rates an installed binary plans with by
# default, to read, or to edit and pass to `memtrain plan --profile`.
install(FILES ${MEMTRAIN_PROFILES} DESTINATION ${CMAKE_INSTALL_DATADIR}/memtrain/profiles)
