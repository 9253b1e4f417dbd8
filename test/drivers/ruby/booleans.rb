# ruby-pg returns every value as a String unless a type map decodes it.
require "pg"

def check(name, ok)
  puts "#{ok ? "ok" : "not ok"} #{name}"
end

conn = PG.connect
key = "booleans #{Process.pid}"
first = conn.exec_params("SELECT claim.once($1)", [key]).getvalue(0, 0)
check("a boolean is \"t\" or \"f\"", first == "t")
check("\"f\" is truthy in Ruby: compare with \"t\"", conn.exec_params("SELECT claim.once($1)", [key]).getvalue(0, 0) == "f")

conn.type_map_for_results = PG::BasicTypeMapForResults.new(conn)
check("with PG::BasicTypeMapForResults, true and false", conn.exec_params("SELECT claim.once($1)", ["#{key} 2"]).getvalue(0, 0) == true)
token = conn.exec_params("SELECT claim.guard_begin($1, $2)", ["#{key} 3", "1 minute"]).getvalue(0, 0)
check("and a token is an Integer", token.is_a?(Integer))
conn.close
