#!/usr/bin/perl

# The api location's dashboard: one self-contained page at
# PREFIX/dashboard.html (and at the bare prefix for Accept: text/html), with
# no external asset; the API endpoints it polls (connections,
# http/requests). Its JavaScript renders live API data: run with node
# (render and track, on two polls' answers) and, when chromium is installed,
# in headless chromium against the running server.

use warnings;
use strict;

use Test::More;
use JSON::PP;
use Encode ();

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http stream upstream_zone/)->plan(27);
my $d = $t->testdir();

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

worker_processes 2;

events {
}

http {
    access_log off;

    upstream app {
        zone apps 64k;
        server 127.0.0.1:%%PORT_8081%%;
        server 127.0.0.1:%%PORT_8089%% max_fails=1 fail_timeout=60s;
    }

    server {
        listen 127.0.0.1:%%PORT_8080%% reuseport;
        location /app/ { proxy_pass http://app/; }
        location /status/ { api write=on; }
    }
}

stream {
    upstream tcp { zone tcps 32k; server 127.0.0.1:%%PORT_8081%%; }
    server { listen 127.0.0.1:%%PORT_8070%%; proxy_pass tcp; }
}

EOF

$t->backend(port(8081));
$t->run();

my ($p1, $dead) = (port(8081), port(8089));

my $ok = 0;
$ok++ for grep { http_get("/app/n$_") =~ /^HTTP\/1.1 200/ } 1 .. 5;
is($ok, 5, 'traffic answered');

my $r = http_get('/status/dashboard.html');
like($r, qr/^HTTP\/1.1 200/, 'dashboard: 200');
like($r, qr/^Content-Type: text\/html; charset=utf-8\r$/mi, 'dashboard: text/html');
my ($page) = $r =~ /\r\n\r\n(.*)\z/s;
$page //= '';
unlike($page, qr/https?:\/\//, 'no http(s):// URL in the page');
unlike($page, qr/<link|<img|\ssrc=|\@import|url\(/i, 'no external asset of any kind');
like($page, qr/const BASE = "\/status\/";/, 'the API base is the location prefix');

like(http("GET /status/ HTTP/1.0\nHost: localhost\nAccept: text/html,*/*\n\n"),
	qr/^Content-Type: text\/html.*<!DOCTYPE html>/msi, 'bare prefix, Accept: text/html: the page');
like(http_get('/status/'), qr/\r\n\r\n\[1,2,3,4,5,6,7,8,9\]\z/, 'bare prefix otherwise: the versions');

sub json_of {
	my ($body) = http_get($_[0]) =~ /\r\n\r\n(.*)\z/s;
	return eval { decode_json($body // '') } // {};
}

my $c = json_of('/status/9/connections');
ok($c->{accepted} >= 9 && $c->{dropped} == 0 && $c->{active} == 1 && exists $c->{idle},
	'connections: accepted, dropped, active, idle');
my $q = json_of('/status/9/http/requests');
ok($q->{total} >= 10 && $q->{current} == 1, 'http/requests: total, current');

# The page's script under node: render() of live answers shows both peers
# with their states, and track() turns two polls into a request rate.
my ($script) = $page =~ /<script>(.*)<\/script>/s;
$t->write_file('dashboard.js', $script // '');
my %data = (
	nginx => json_of('/status/9/nginx'),
	connections => json_of('/status/9/connections'),
	requests => json_of('/status/9/http/requests'),
	http => json_of('/status/9/http/upstreams'),
	stream => json_of('/status/9/stream/upstreams'),
);
$t->write_file('poll1.json', encode_json(\%data));
http_get("/app/more$_") for 1 .. 4;
$data{http} = json_of('/status/9/http/upstreams');
$t->write_file('poll2.json', encode_json(\%data));
$t->write_file('run.js', <<'EOF');
const fs = require('fs'), vm = require('vm');
const dir = process.argv[2];
const sandbox = { module: { exports: {} } };
vm.runInNewContext(fs.readFileSync(dir + '/dashboard.js', 'utf8'), sandbox);
const { render, track } = sandbox.module.exports;
const history = {};
const one = JSON.parse(fs.readFileSync(dir + '/poll1.json', 'utf8'));
const two = JSON.parse(fs.readFileSync(dir + '/poll2.json', 'utf8'));
track(history, one, 1000);
track(history, two, 3000);
process.stdout.write(render(two, history));
EOF

SKIP: {
	my $node = (grep { -x } '/usr/bin/node', '/usr/bin/nodejs')[0];
	skip 'no node', 8 unless $node;
	my $html = `$node $d/run.js $d 2>&1`;
	like($html, qr/<div class="peer state-up" data-peer="127\.0\.0\.1:$p1">/,
		'node: live peer rendered, state up');
	like($html, qr/<div class="peer state-unavail" data-peer="127\.0\.0\.1:$dead">/,
		'node: failing peer rendered, state unavail');
	like($html, qr/data-peer="127\.0\.0\.1:$p1">.*?<b>2\.0<\/b>\/s/s,
		'node: 4 requests in 2 s make 2.0/s');
	like($html, qr/<h2>stream tcp<\/h2>.*zone <b>tcps<\/b>/s, 'node: stream upstream and its zone');

	# A pick_first upstream with a resolve line, as the API shows it, at a
	# fixed time: the choice, the chosen peer, the answer's countdown and
	# its last error.
	$t->write_file('synth.js', <<'EOF2');
const fs = require('fs'), vm = require('vm');
const dir = process.argv[2];
const sandbox = { module: { exports: {} } };
vm.runInNewContext(fs.readFileSync(dir + '/dashboard.js', 'utf8'), sandbox);
const { render } = sandbox.module.exports;
const peer = (id, server, state) => ({ id, server, state, active: 0, requests: 0,
	responses: { "2xx": 0, "4xx": 0, "5xx": 0 }, fails: 0, sent: 0, received: 0 });
const data = { http: { pf: { peers: [peer(0, "10.0.0.1:80", "up"), peer(1, "10.0.0.2:80", "up")],
	sluice: { zone: "z", size: 65536, used: 4096, peer_slots: 200, peer_slots_used: 2,
		pick_first: "10.0.0.2:80",
		resolve: [{ name: "app.test:80", addresses: ["10.0.0.1:80"],
			expires: "2026-01-01T00:00:12.000Z", last_error: "2: Server failure" }] } } } };
process.stdout.write(render(data, {}, Date.parse("2026-01-01T00:00:00.000Z")));
EOF2
	my $synth = Encode::decode("UTF-8", `$node $d/synth.js $d 2>&1`);
	like($synth, qr/pick_first \x{2192} <b>10\.0\.0\.2:80<\/b>/, 'node: the pick_first choice')
		or diag($synth);
	like($synth, qr/data-peer="10\.0\.0\.2:80">.*?<small class="chosen">chosen<\/small>/,
		'node: the chosen peer marked');
	# 100 upstreams of 50 peers: every row rendered (the time is shown, not
	# asserted).
	$t->write_file('big.js', <<'EOF2');
const fs = require('fs'), vm = require('vm');
const dir = process.argv[2];
const sandbox = { module: { exports: {} } };
vm.runInNewContext(fs.readFileSync(dir + '/dashboard.js', 'utf8'), sandbox);
const { render, track } = sandbox.module.exports;
const http = {};
for (let u = 0; u < 100; u++) {
	const peers = [];
	for (let p = 0; p < 50; p++) peers.push({ id: p, server: "10.0." + u + "." + p + ":80",
		state: p % 7 ? "up" : "unavail", active: 1, requests: u * p,
		responses: { "2xx": u * p, "4xx": 0, "5xx": 0 }, fails: 0, sent: 0, received: 0 });
	http["u" + u] = { peers, sluice: { zone: "z" + u, size: 1 << 20, used: 1 << 16,
		peer_slots: 2000, peer_slots_used: 50 } };
}
const history = {};
track(history, { http }, 0);
const t0 = process.hrtime.bigint();
const html = render({ http }, history);
const ms = Number(process.hrtime.bigint() - t0) / 1e6;
process.stdout.write((html.match(/<div class="peer state-/g) || []).length + " " + ms.toFixed(1) + "\n");
EOF2
	my ($rows, $ms) = split ' ', (`$node $d/big.js $d 2>&1` // '');
	is($rows, 5000, 'node: 100 upstreams of 50 peers render every row');
	note("render of 5000 peers: $ms ms") if defined $ms;
	like($synth, qr/app\.test:80 \x{2192} 10\.0\.0\.1:80 <span class="expires">expires in 12s<\/span> \x{2014} <span class="last-error">2: Server failure<\/span>/,
		'node: the resolved name, its countdown and last error');
}

# Headless chromium, driven over the DevTools protocol: the page polls the
# live API and renders the peers in their states and the zones' usage; a
# screenshot is saved (dashboard.png in the test directory).
SKIP: {
	my $chromium = (grep { -x } '/usr/bin/chromium', '/usr/bin/chromium-browser')[0];
	skip 'no chromium', 9 unless $chromium;
	skip 'no python3-websocket', 9
		unless system('/usr/bin/python3', '-c', 'import websocket') == 0;
	my $url = 'http://127.0.0.1:' . port(8080) . '/status/dashboard.html';
	# Then the live peer (server 0 of app) is marked down through the API.
	my $patch = 'http://127.0.0.1:' . port(8080) . '/status/9/http/upstreams/app/servers/0';
	my $out = `timeout 90 /usr/bin/python3 lib/dashboard_cdp.py $chromium $url $d $patch 127.0.0.1:$p1 2>&1`;
	my $res = eval { decode_json((split /\n/, $out)[-1] // '') } // {};
	ok(defined $res->{rendered}, 'chromium: the first poll rendered') or diag($out);
	my $dom = $t->read_file('dom1.html') // '';
	like($dom, qr/<div class="peer state-up" data-peer="127\.0\.0\.1:$p1">/,
		'chromium: live peer rendered from the API');
	like($dom, qr/<div class="peer state-unavail" data-peer="127\.0\.0\.1:$dead">/,
		'chromium: failing peer in its colour class');
	like($dom, qr/zone <b>apps<\/b>.*?<div class="bar" title="zone usage"><div style="width:[\d.]+%">/s,
		'chromium: the zone and its usage bar');
	like($dom, qr/generation <b id="generation">1<\/b>.*<span id="error"><\/span>/s,
		'chromium: generation shown, no error');
	is($res->{patch_status}, 200, 'chromium: the API took the PATCH');
	ok(defined $res->{down_after} && $res->{down_after} <= 1.5,
		'chromium: the peer shows down within one poll (1 s)') or diag($out);
	my ($page_w, $view_w) = @{$res->{phone} // [0, -1]};
	ok($view_w == 390 && $page_w <= $view_w, 'chromium: no sideways scrolling at a phone\'s width')
		or diag("page $page_w, viewport $view_w");
	my $png = $t->read_file('dashboard.png') // '';
	ok(substr($png, 0, 8) eq "\x89PNG\r\n\x1a\n" && length($png) > 10000,
		'chromium: screenshot saved') or diag(length $png);
}
