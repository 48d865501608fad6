"""The store's configuration: settings (:mod:`.conf`), database URLs (:mod:`.dburls`), index
declarations (:mod:`.indexes`), the metadata models (:mod:`.metadata`) and the server check
every connection passes (:mod:`.server_support`)."""
