"""Pure values, no database: ids and their buckets (:mod:`.entity_ids`, :mod:`.bucket_hash`),
the body codec (:mod:`.codec`), index values (:mod:`.index_values`), conditions a write
requires (:mod:`.expected`), the JSON view of a body (:mod:`.jsonview`) and the one bounds check
of a count or a number of seconds (:mod:`.bounds`)."""
