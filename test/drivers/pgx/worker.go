// A pg_claim worker with pgx v4. Connects with the libpq environment (PGHOST, ...).
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgconn"
	"github.com/jackc/pgx/v4"
)

const stale = "PC001" // the token is not the live claim (lease lost, item finished)

// finish commits the user's write and complete together, fenced by assert_token.
func finish(ctx context.Context, conn *pgx.Conn, id, token int64, address string) (bool, error) {
	err := conn.BeginFunc(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT claim.assert_token($1)", token); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "INSERT INTO sent_mail (item_id, token, address) VALUES ($1, $2, $3)",
			id, token, address); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "SELECT claim.complete($1, $2)", token, []string{address})
		return err
	})
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == stale {
		fmt.Println("stale", token, pgErr.Code) // rolled back: nothing of this item was written
		return false, nil
	}
	return err == nil, err
}

func run(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, "")
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	var last struct {
		id, token int64
		address   string
	}
	for {
		var id, token int64
		var address *string
		err := conn.QueryRow(ctx, "SELECT id, token, payload->>'to' FROM claim.claim_next($1, wait => $2)",
			"emails", time.Second).Scan(&id, &token, &address)
		if errors.Is(err, pgx.ErrNoRows) {
			break // the queue stayed empty for a second
		} else if err != nil {
			return err
		}
		if address == nil {
			if _, err := conn.Exec(ctx, "SELECT claim.fail($1, $2)", token, "no address"); err != nil {
				return err
			}
			fmt.Println("failed", id, token)
			continue
		}
		// heartbeat
		if _, err := conn.Exec(ctx, "SELECT claim.extend($1, $2)", token, 30*time.Second); err != nil {
			return err
		}
		ok, err := finish(ctx, conn, id, token, *address)
		if err != nil {
			return err
		}
		if ok {
			fmt.Println("done", id, token)
		}
		last.id, last.token, last.address = id, token, *address
	}
	if last.token != 0 {
		// a finished token again: what a worker that lost its lease sees
		if _, err := finish(ctx, conn, last.id, last.token, last.address); err != nil {
			return err
		}
	}
	return nil
}

func main() {
	if err := run(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
