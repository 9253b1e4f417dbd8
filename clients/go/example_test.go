package pgclaim_test

// The README's examples, compiled by the suite (not run: they need a server).

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"pgclaim"
)

func deliver(to, body string) error { return nil }

func ExampleWorker() {
	w := pgclaim.NewWorker("", "emails", func(ctx context.Context, job *pgclaim.Job) (interface{}, error) {
		var mail struct{ To, Body string }
		if err := job.Decode(&mail); err != nil {
			return nil, err // fails the attempt
		}
		if err := deliver(mail.To, mail.Body); err != nil {
			return nil, pgclaim.RetryAfter(30*time.Second, err)
		}
		return map[string]bool{"sent": true}, nil // the item's result
	})
	w.Concurrency = 8
	w.HandleSignals = true // SIGTERM / SIGINT stop it cleanly
	stats, err := w.Run(context.Background())
	if err != nil {
		log.Fatal(err) // an error no retry can fix: unknown queue, no grant, ...
	}
	log.Printf("%+v", stats)
}

func ExampleWorker_transactional() {
	w := pgclaim.NewWorker("", "charges", func(ctx context.Context, job *pgclaim.Job) (interface{}, error) {
		var order struct {
			Order  int64
			Amount int64
		}
		if err := job.Decode(&order); err != nil {
			return nil, err
		}
		_, err := job.Tx.Exec(ctx, "INSERT INTO charges (order_id, amount) VALUES ($1, $2)",
			order.Order, order.Amount)
		return nil, err // the worker completes the item in job.Tx and commits
	})
	w.Transactional = true
	w.Lease = time.Minute // longer than the handler's longest statement
	if _, err := w.Run(context.Background()); err != nil {
		log.Fatal(err)
	}
}

func ExampleClient() {
	ctx := context.Background()
	c, err := pgclaim.Connect(ctx, "") // "": $PG_CLAIM_DSN, else PG*
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close(ctx)
	id, err := c.Enqueue(ctx, "emails", map[string]string{"to": "a@example.com"},
		&pgclaim.EnqueueOptions{Priority: 5, DedupKey: "welcome:42"})
	if errors.Is(err, pgclaim.ErrUnknownQueue) {
		log.Fatal("create the queue first: claim.create_queue('emails')")
	}
	ids, _ := c.EnqueueMany(ctx, "emails", []interface{}{map[string]int{"n": 1}, map[string]int{"n": 2}}, nil)
	state, _ := c.ItemState(ctx, "emails", id, 10*time.Second) // waits in the server
	fmt.Println(ids, state.State)
}

func ExampleClient_Guard() {
	ctx := context.Background()
	c, _ := pgclaim.Connect(ctx, "")
	result, ran, err := c.Guard(ctx, "charge:order-17", 2*time.Minute,
		func(ctx context.Context) (interface{}, error) {
			return map[string]string{"charge_id": "ch_1"}, nil // runs once, to success
		})
	fmt.Println(string(result), ran, err)
}
