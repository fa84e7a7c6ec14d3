#!/usr/bin/python3
"""The M/M/1 model of bench/bench_sim.cpp (BM_MM1) written for SimPy.

Debian 12's python3-simpy is SimPy 2.3.1, so this uses the SimPy 2 API
(Process / request / hold / release). Same parameters: utilisation 0.8,
mean inter-arrival 1000, mean service 800 (time units are arbitrary).
Prints one line: "customers=N seconds=S customers_per_s=R".
"""
import random
import sys
import time

from SimPy.Simulation import Process, Resource, activate, hold, initialize, release, request, simulate


class Customer(Process):
    def visit(self, server, mean_service):
        yield request, self, server
        yield hold, self, random.expovariate(1.0 / mean_service) + 1
        yield release, self, server


class Source(Process):
    def generate(self, n, mean_gap, mean_service, server):
        for _ in range(n):
            c = Customer()
            activate(c, c.visit(server, mean_service))
            yield hold, self, random.expovariate(1.0 / mean_gap) + 1


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200000
    random.seed(1)
    initialize()
    server = Resource(capacity=1)
    src = Source()
    activate(src, src.generate(n, 1000.0, 800.0, server))
    t0 = time.process_time()  # CPU time, as Google Benchmark rate counters use
    simulate(until=1e18)
    dt = time.process_time() - t0
    print(f"customers={n} seconds={dt:.3f} customers_per_s={n / dt:.0f}")


if __name__ == "__main__":
    main()
