# The hardware profiles of profiles/ compiled into memtrain_lib (src/forecast/shipped_profiles.h), so the binary
# plans from any directory; regenerated when a profile changes, and on reconfiguring when one is added. The CPU's
# (profiles/*.json) and the GPUs' (profiles/gpu/*.json) are two lists.
function(memtrain_embed_profiles glob function)
  file(GLOB profiles CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/${glob})
  set(cpp ${PROJECT_BINARY_DIR}/generated/${function}.cpp)
  add_custom_command(
    OUTPUT ${cpp}
    COMMAND ${CMAKE_COMMAND} "-DPROFILES=${profiles}" -DFUNCTION=${function} -DSOURCE_DIR=${PROJECT_SOURCE_DIR}
            -DOUT=${cpp} -P ${PROJECT_SOURCE_DIR}/cmake/embed_profiles.cmake
    DEPENDS ${profiles} ${PROJECT_SOURCE_DIR}/cmake/embed_profiles.cmake
    COMMENT "Embedding the hardware profiles of ${glob}"
    VERBATIM)
  target_sources(memtrain_lib PRIVATE ${cpp})
  set(MEMTRAIN_EMBEDDED_PROFILES ${profiles} PARENT_SCOPE)
endfunction()
memtrain_embed_profiles(profiles/*.json shipped_profile_files)
set(MEMTRAIN_CPU_PROFILES ${MEMTRAIN_EMBEDDED_PROFILES})
memtrain_embed_profiles(profiles/gpu/*.json shipped_gpu_profile_files)
# Installed beside the binary as files too (share/memtrain/profiles): the rates an installed binary plans with by
# default, to read, or to edit and pass to `memtrain plan --profile`.
install(FILES ${MEMTRAIN_CPU_PROFILES} DESTINATION ${CMAKE_INSTALL_DATADIR}/memtrain/profiles)
install(FILES ${MEMTRAIN_EMBEDDED_PROFILES} DESTINATION ${CMAKE_INSTALL_DATADIR}/memtrain/profiles/gpu)
