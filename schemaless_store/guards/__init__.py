"""What may write where and when: the write fence (:mod:`.fence`: a bucket being moved refuses
writes on its source), the lock one background worker holds on a server
(:mod:`.server_lock`), and the throttle that paces background work (:mod:`.throttle`)."""
