// Wake-latency bench for pg_claim, a libpq client.
//
//   wake_latency CONNINFO claim  WAITERS ITEMS RATE
//   wake_latency CONNINFO listen WAITERS ITEMS RATE
//   wake_latency CONNINFO expiry WAITERS ITEMS SPACING_MS
//
// claim:  WAITERS threads block in claim.claim_next(wait => '5 s') on queue
//         'wake_bench'; one producer enqueues ITEMS items one per transaction
//         at RATE items/s. Latency = time the waiter's call returned minus
//         time the producer's COMMIT (autocommit enqueue) returned, both on
//         this machine's monotonic clock.
// listen: the same with the peers' pattern: producer INSERT + NOTIFY in one
//         transaction, waiters LISTEN and claim with FOR UPDATE SKIP LOCKED.
// expiry: ITEMS items are claimed (lease 1500 ms) and never completed, one
//         every SPACING_MS; WAITERS threads wait in claim_next and receive
//         them again (ITEMS * SPACING_MS must stay below 1500). Lag = server clock when re-delivered minus the first
//         claim's lease_until.
//
// Prints one line: "<mode> n=<n> p50=<ms> p99=<ms> max=<ms> lost=<n>".
#include <libpq-fe.h>
#include <sys/select.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

double now_ms() {
    return std::chrono::duration<double, std::milli>(Clock::now().time_since_epoch()).count();
}

PGconn *connect_or_die(const char *conninfo) {
    PGconn *c = PQconnectdb(conninfo);
    if (PQstatus(c) != CONNECTION_OK) {
        fprintf(stderr, "connect: %s", PQerrorMessage(c));
        exit(2);
    }
    return c;
}

void exec_or_die(PGconn *c, const char *sql) {
    PGresult *r = PQexec(c, sql);
    ExecStatusType st = PQresultStatus(r);
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
        fprintf(stderr, "%s: %s", sql, PQerrorMessage(c));
        exit(2);
    }
    PQclear(r);
}

// Runs a query that returns rows, or exits with "what: error". at: set to when the call returned.
PGresult *query_or_die(PGconn *c, const char *sql, const char *what, double *at = nullptr) {
    PGresult *r = PQexec(c, sql);
    if (at) *at = now_ms();
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        fprintf(stderr, "%s: %s", what, PQerrorMessage(c));
        exit(2);
    }
    return r;
}

void complete_or_die(PGconn *c, const std::string &token) {
    std::string sql = "SELECT claim.complete(" + token + ")";
    exec_or_die(c, sql.c_str());
}

struct Shared {
    std::vector<double> sent;  // per item: producer's commit returned
    std::vector<double> got;   // per item: waiter's call returned (or server lag)
    std::atomic<int> received{0};
    std::atomic<bool> done{false};
    std::atomic<int> items{0};
};

void print(const char *mode, Shared &s, bool lag_direct) {
    std::vector<double> lat;
    int lost = 0;
    for (int i = 0; i < s.items; ++i) {
        if (s.got[i] < 0 || (!lag_direct && s.sent[i] < 0)) {
            ++lost;
            continue;
        }
        lat.push_back(lag_direct ? s.got[i] : s.got[i] - s.sent[i]);
    }
    std::sort(lat.begin(), lat.end());
    auto pct = [&](double p) {
        if (lat.empty()) return 0.0;
        size_t k = (size_t)(p * (lat.size() - 1) + 0.5);
        return lat[k];
    };
    printf("%s n=%zu p50=%.3f p99=%.3f max=%.3f lost=%d\n", mode, lat.size(), pct(0.50),
           pct(0.99), lat.empty() ? 0.0 : lat.back(), lost);
}

// --- claim ---------------------------------------------------------------------

void claim_waiter(const char *conninfo, Shared *s) {
    PGconn *c = connect_or_die(conninfo);
    while (!s->done.load()) {
        double t;
        PGresult *r = query_or_die(c,
                                   "SELECT (payload->>'i')::int, token FROM "
                                   "claim.claim_next('wake_bench', wait => '1 s')",
                                   "claim_next", &t);
        if (PQntuples(r) == 1) {
            int i = atoi(PQgetvalue(r, 0, 0));
            std::string tok = PQgetvalue(r, 0, 1);
            PQclear(r);
            if (i >= 0 && i < s->items) s->got[i] = t;
            s->received++;
            complete_or_die(c, tok);
        } else {
            PQclear(r);
        }
    }
    PQfinish(c);
}

// --- listen (baseline) ------------------------------------------------------------

void listen_waiter(const char *conninfo, Shared *s) {
    PGconn *c = connect_or_die(conninfo);
    exec_or_die(c, "LISTEN wake_bench");
    while (!s->done.load()) {
        // Take what is there, then sleep until a notification arrives.
        for (;;) {
            double t;
            PGresult *r = query_or_die(c,
                                       "UPDATE wake_jobs SET status = 'taken' WHERE id = ("
                                       "  SELECT id FROM wake_jobs WHERE status = 'new'"
                                       "  ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING i",
                                       "take", &t);
            if (PQntuples(r) == 0) {
                PQclear(r);
                break;
            }
            int i = atoi(PQgetvalue(r, 0, 0));
            PQclear(r);
            if (i >= 0 && i < s->items) s->got[i] = t;
            s->received++;
            char sql[128];
            snprintf(sql, sizeof sql, "UPDATE wake_jobs SET status = 'done' WHERE i = %d", i);
            exec_or_die(c, sql);
        }
        int sock = PQsocket(c);
        fd_set fds;
        FD_ZERO(&fds);
        FD_SET(sock, &fds);
        timeval tv{0, 200000};
        select(sock + 1, &fds, nullptr, nullptr, &tv);
        PQconsumeInput(c);
        while (PGnotify *n = PQnotifies(c)) PQfreemem(n);
    }
    PQfinish(c);
}

void producer(const char *conninfo, Shared *s, bool listen, double rate) {
    PGconn *c = connect_or_die(conninfo);
    double start = now_ms();
    for (int i = 0; i < s->items; ++i) {
        double due = start + i * 1000.0 / rate;
        double wait = due - now_ms();
        if (wait > 0) std::this_thread::sleep_for(std::chrono::microseconds((long)(wait * 1000)));
        char sql[256];
        if (listen)
            snprintf(sql, sizeof sql,
                     "BEGIN; INSERT INTO wake_jobs (i, status) VALUES (%d, 'new'); "
                     "NOTIFY wake_bench; COMMIT",
                     i);
        else
            snprintf(sql, sizeof sql, "SELECT claim.enqueue('wake_bench', '{\"i\": %d}')", i);
        PGresult *r = PQexec(c, sql);
        double t = now_ms();
        ExecStatusType st = PQresultStatus(r);
        if (st != PGRES_TUPLES_OK && st != PGRES_COMMAND_OK) {
            fprintf(stderr, "produce: %s", PQerrorMessage(c));
            exit(2);
        }
        PQclear(r);
        s->sent[i] = t;
    }
    PQfinish(c);
}

// Drops queue `name` where it exists and creates it again (args: more create_queue arguments).
void fresh_queue(PGconn *admin, const std::string &name, const std::string &args) {
    std::string drop = "SELECT claim.drop_queue('" + name + "') FROM claim.queues WHERE name = '" + name + "'";
    std::string create = "SELECT claim.create_queue('" + name + "'" + args + ")";
    exec_or_die(admin, drop.c_str());
    exec_or_die(admin, create.c_str());
}

// Starts `waiters` threads of `waiter`, gives them 0.5 s to block, then produces s.items items.
void waiters_then_producer(std::vector<std::thread> &threads, int waiters,
                           void (*waiter)(const char *, Shared *), const char *conninfo, Shared &s,
                           bool listen, double rate) {
    for (int w = 0; w < waiters; ++w) threads.emplace_back(waiter, conninfo, &s);
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    producer(conninfo, &s, listen, rate);
}

// --- expiry ---------------------------------------------------------------------------

void expiry_waiter(const char *conninfo, Shared *s, const std::vector<double> *until) {
    PGconn *c = connect_or_die(conninfo);
    while (!s->done.load()) {
        PGresult *r = query_or_die(c,
                                   "SELECT (payload->>'i')::int, token, "
                                   "extract(epoch FROM clock_timestamp())::float8 * 1000 FROM "
                                   "claim.claim_next('wake_expiry', wait => '1 s')",
                                   "claim_next");
        if (PQntuples(r) == 1) {
            int i = atoi(PQgetvalue(r, 0, 0));
            double t = atof(PQgetvalue(r, 0, 2));
            std::string tok = PQgetvalue(r, 0, 1);
            PQclear(r);
            if (i >= 0 && i < s->items && (*until)[i] > 0) s->got[i] = t - (*until)[i];
            s->received++;
            complete_or_die(c, tok);
        } else {
            PQclear(r);
        }
    }
    PQfinish(c);
}

}  // namespace

int main(int argc, char **argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: %s CONNINFO claim|listen|expiry WAITERS ITEMS RATE|SPACING_MS\n",
                argv[0]);
        return 2;
    }
    const char *conninfo = argv[1];
    std::string mode = argv[2];
    int waiters = atoi(argv[3]);
    Shared s;
    s.items = atoi(argv[4]);
    double arg = atof(argv[5]);
    s.sent.assign(s.items, -1);
    s.got.assign(s.items, -1);

    PGconn *admin = connect_or_die(conninfo);
    std::vector<std::thread> threads;
    if (mode == "claim") {
        fresh_queue(admin, "wake_bench", "");
        waiters_then_producer(threads, waiters, claim_waiter, conninfo, s, false, arg);
    } else if (mode == "listen") {
        exec_or_die(admin, "DROP TABLE IF EXISTS wake_jobs");
        exec_or_die(admin,
                    "CREATE TABLE wake_jobs (id bigserial PRIMARY KEY, i int NOT NULL, "
                    "status text NOT NULL)");
        exec_or_die(admin, "CREATE INDEX ON wake_jobs (i)");
        waiters_then_producer(threads, waiters, listen_waiter, conninfo, s, true, arg);
    } else if (mode == "expiry") {
        fresh_queue(admin, "wake_expiry", ", lease => '1500 ms'");
        static std::vector<double> until(s.items, -1);
        // Claim every item once and drop it (a worker that died). All within
        // the lease (ITEMS * SPACING_MS < 1500 ms), so the claim takes the
        // new item and never one that expired already.
        for (int i = 0; i < s.items; ++i) {
            char sql[256];
            snprintf(sql, sizeof sql,
                     "SELECT claim.enqueue('wake_expiry', '{\"i\": %d}'); "
                     "SELECT extract(epoch FROM lease_until)::float8 * 1000, "
                     "       (payload->>'i')::int "
                     "FROM claim.claim_next('wake_expiry')",
                     i);
            PGresult *r = PQexec(admin, sql);
            if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1) {
                fprintf(stderr, "expiry setup: %s", PQerrorMessage(admin));
                return 2;
            }
            int j = atoi(PQgetvalue(r, 0, 1));
            if (j != i) {
                // The setup outlasted the first leases (a loaded machine): the
                // claim took an item that had expired already. Measure the
                // items claimed so far only.
                if (j >= 0 && j < s.items) until[j] = -1;
                PQclear(r);
                fprintf(stderr, "expiry: setup outlasted the lease, measuring %d items\n", i);
                s.items = i;
                break;
            }
            until[i] = atof(PQgetvalue(r, 0, 0));
            PQclear(r);
            if (i == 0)
                for (int w = 0; w < waiters; ++w)
                    threads.emplace_back(expiry_waiter, conninfo, &s, &until);
            std::this_thread::sleep_for(std::chrono::microseconds((long)(arg * 1000)));
        }
    } else {
        fprintf(stderr, "unknown mode %s\n", mode.c_str());
        return 2;
    }
    // Let the last items arrive (at most 5 s).
    double end = now_ms() + 5000;
    while (s.received.load() < s.items && now_ms() < end)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    s.done = true;
    for (auto &t : threads) t.join();
    print(mode.c_str(), s, mode == "expiry");
    PQfinish(admin);
    return 0;
}
