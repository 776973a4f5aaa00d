# Runs scripts/figures.py into a fresh folder and checks that every chapter's SVG and PNG is
# there and not empty (ctest -L figures). The names are the ones the READMEs embed.
file(REMOVE_RECURSE ${OUT})
execute_process(COMMAND ${PYTHON} ${SCRIPT} --out ${OUT} --bin-dir ${BIN_DIR}
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "figures.py exited with ${rc}")
endif()
foreach(name ch01_number_lines ch02_loss_scale ch03_memory_bill ch03_fp8_amax ch04_ring_and_overlap
             ch05_zero_memory ch06_sharding_map ch06_cp_balance ch07_schedules ch08_training_run
             ch09_load_balance ch09_capacity_drops ch09_dispatch_bytes)
  foreach(ext svg png)
    if(NOT EXISTS ${OUT}/${name}.${ext})
      message(FATAL_ERROR "figures.py did not write ${name}.${ext}")
    endif()
    file(SIZE ${OUT}/${name}.${ext} size)
    if(size LESS 1000)
      message(FATAL_ERROR "${name}.${ext} is only ${size} bytes")
    endif()
  endforeach()
endforeach()
message(STATUS "every chapter's figure written to ${OUT}")
