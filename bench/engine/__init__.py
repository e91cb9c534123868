"""The measurements of bench/run.py, one module per family (run.py holds the goals and drives them):

common     the kafkalog a run measures (a snapshot), sizes (Params), records (Data), scratch dirs (Ctx), stores
writes     g1 append_batch + flush against lmdb, aiokafka, persist-queue, diskcache, the raw disk; g2 append per
           record; g3 fsync per record; g5.lz4
reads      g4 records() against aiokafka's parser, read_columns()
seek       g5.time_seek
biglogs    g6 delete-before, unclean open, RSS (and their writer processes)
producer   g7 KafkaProducer.send against append_batch
queues     g8 DurableQueue against persist-queue, diskcache, litequeue
consumer   g9 KafkaConsumer.poll, g10 cross-process wake-up
"""
