# A pg_claim worker with ruby-pg. Connects with the libpq environment (PGHOST, ...).
require "json"
require "pg"

STALE = "PC001" # the token is not the live claim (lease lost, item finished)

# The user's write and complete commit together, fenced by assert_token.
def finish(conn, id, token, address)
  conn.transaction do
    conn.exec_params("SELECT claim.assert_token($1)", [token])
    conn.exec_params("INSERT INTO sent_mail (item_id, token, address) VALUES ($1, $2, $3)", [id, token, address])
    conn.exec_params("SELECT claim.complete($1, $2)", [token, JSON.generate([address])])
  end
  true
rescue PG::Error => e
  state = e.result&.error_field(PG::PG_DIAG_SQLSTATE)
  raise unless state == STALE
  puts "stale #{token} #{state}" # rolled back: nothing of this item was written
  false
end

conn = PG.connect
last = nil
loop do
  rows = conn.exec_params("SELECT id, token, payload->>'to' AS address FROM claim.claim_next($1, wait => $2)",
                          ["emails", "1 second"])
  break if rows.ntuples.zero? # the queue stayed empty for a second

  id, token, address = rows[0].values_at("id", "token", "address") # strings (or nil)
  if address.nil?
    conn.exec_params("SELECT claim.fail($1, $2)", [token, "no address"])
    puts "failed #{id} #{token}"
    next
  end
  conn.exec_params("SELECT claim.extend($1, $2)", [token, "30 seconds"]) # heartbeat
  puts "done #{id} #{token}" if finish(conn, id, token, address)
  last = [id, token, address]
end
finish(conn, *last) if last # a finished token again: what a worker that lost its lease sees
conn.close
