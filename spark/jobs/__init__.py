"""One module per job: a pure ``transform``-style function, an I/O ``run(spark, args)`` and ``main(argv)``."""
