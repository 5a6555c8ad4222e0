"""The fixed seeds CI runs (``test_campaign.py``) and what each draws: a module of its own, so
that other tests can check those seeds keep their scenarios."""

# Seeds drawn with the default options (--spark-share 0.01); what each one covers: every
# backend and mode, every kill target, a kill of each service, groups (14 seeds; the
# campaigns in docs/chaos.md run thousands). Seed 29 became a group when groups joined the
# mix; 105 took its place. 52 and 31 add Delta (issue 48), alone and in a group.
CI_SEEDS = {
    4: "s3/parquet local worker before_pre_commit:kill, s3 paused 2.7 s in the restart",
    15: "files/parquet local worker before_pre_commit:kill, retried in the same query",
    7: "iceberg/sqlite local worker after_invoke:kill, retried in the same query",
    86: "iceberg/postgres local postgres (the catalog's database) killed while the query is down",
    26: "postgres/transaction local driver after_commit:kill",
    105: "postgres/two_phase local postgres killed while the query is down",
    11: "mysql/transaction local mariadb killed while the query is down",
    18: "mysql/two_phase local driver between_commits:kill",
    17: "kafka/per_partition local broker killed while the query is down",
    55: "kafka/atomic local driver after_decision:exit",
    1265: "mysql/transaction spark executor JVM killed in local-cluster[2,1,1024]",
    572: "group/postgres+files local driver after_decision:kill",
    52: "delta/append local worker after_pre_commit:kill",
    31: "group/delta+postgres local driver after_commit:kill",
}
