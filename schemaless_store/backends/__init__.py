"""Django database backends of the store (``ENGINE``): ``galera``, a MariaDB Galera cluster
reached through a list of its nodes (docs/replicas.md, "Galera")."""
