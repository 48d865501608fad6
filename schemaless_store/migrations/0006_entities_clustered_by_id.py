"""Cluster each shard's ``entities`` by ``id`` on MariaDB (docs/design.md#the-entities-table).

Django's model is unchanged (``added_id`` stays its primary key: the store's own SQL never names
the primary key). A table of more than ``clustering.AT_MIGRATE_MAX_ROWS`` rows is left as it is,
and the system check ``schemaless.W006`` names ``manage.py clusterentities``, which converts it
online.
"""

from django.db import migrations

from schemaless_store.tables import clustering


class Migration(migrations.Migration):

    dependencies = [
        ('schemaless_store', '0005_shard_map_and_moves'),
    ]

    operations = [
        migrations.RunPython(
            clustering.migrate_forwards,
            migrations.RunPython.noop,
            hints={'model_name': 'entity'},
            elidable=False,
        ),
    ]
