ramferry_test(engine_unit_test command_ring_test.cc dirty_bitmap_test.cc
  scheduler_test.cc round_barrier_test.cc zero_pages_test.cc
  compressor_test.cc LABELS unit)
ramferry_test(verify_test verify_test.cc LABELS unit)
ramferry_test(channel_receiver_test channel_receiver_test.cc LABELS unit
  LIBS ramferry_memory_transport)
ramferry_test(untouched_test untouched_test.cc LABELS unit)
