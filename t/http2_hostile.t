#!/usr/bin/perl

# Hostile HTTP/2 clients, the 2019 and later attack classes against a
# server's frame layer: each leaves the worker's memory bounded (its RSS
# grows by less than a bound), sends nothing on to the backend that a
# well-formed request would not, and leaves the worker serving others.
#   - HPACK bomb: one 4 kB value in the dynamic table, then a header block
#     of 10,000 one-byte references to it (40 MB decoded): refused, never
#     decoded whole;
#   - zero-length header names (CVE-2019-9516): refused, and logged as the
#     client's fault;
#   - ping flood and settings flood (CVE-2019-9512, -9515) from a client
#     that never reads: the connection stops being read once its answers
#     back up;
#   - empty DATA frames (CVE-2019-9518) on an open request body: a few
#     pass, a flood gets GOAWAY;
#   - two connections that each open 50 downloads of 5 MB and never read
#     nor open their windows (CVE-2019-9517): what is read ahead for them
#     is a buffer or so a stream, not the 500 MB they asked for;
#   - random frames, mostly well-formed, from 1,000 connections (seeded;
#     H2_FUZZ_SEED replays), some of their requests answered by an upstream
#     at random.
# Core Perl and Test::Sluice::H2 only.

use warnings;
use strict;

use Test::More;
use Time::HiRes qw/time sleep/;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;
use Test::Sluice::H2 qw/h2_connect h2_request h2_frames h2_data_of/;

plan(skip_all => 'no curl with HTTP/2') unless `curl --version 2>/dev/null` =~ /HTTP2/;

my $t = Test::Sluice->new()->has(qw/http/)->plan(22);
my $d = $t->testdir();

$t->write_file('big.bin', 'x' x (5 << 20));

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

http {
    access_log off;
    keepalive_timeout 2s;

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        http2 on;
        root %%TESTDIR%%;
        location / { return 200 "ok"; }
        location = /big.bin { }
        location /p/ { proxy_pass http://127.0.0.1:%%PORT_8082%%/; }
        location /u/ {
            proxy_pass http://127.0.0.1:%%PORT_8083%%/;
            proxy_read_timeout 300ms;
        }
    }
}
EOF

$t->backend(port(8082));
# For the random frames: an upstream that answers at random, so that what
# HTTP/2 makes of odd HTTP/1 answers is fuzzed too: 1xx first, bodies
# where none may be, lengths right, short or twice, chunked right and
# wrong, close-delimited, nothing, a close.
$t->random_backend(port(8083), \&upstream_answer);
$t->run();

sub upstream_answer {
	my $r = rand();
	return { hold => 1 } if $r < 0.03;
	return { close => 1 } if $r < 0.06;
	my $body = 'b' x int(rand(3000));
	my $out = rand() < 0.1 ? "HTTP/1.1 103 Early Hints\r\nLink: </s>\r\n\r\n" : '';
	$out .= 'HTTP/1.1 ' . (200, 204, 304, 404, 500)[int(rand(5))] . " X\r\n";
	$out .= "Trailer: x-t\r\n" if rand() < 0.1;
	my ($f, $close) = (rand(), 0);
	if ($f < 0.5) {
		$out .= 'Content-Length: ' . length($body) . "\r\n\r\n$body";
	} elsif ($f < 0.55) {
		$out .= 'Content-Length: ' . (length($body) + 7) . "\r\n\r\n$body";
		$close = 1;
	} elsif ($f < 0.6) {
		$out .= "Content-Length: 1\r\nContent-Length: 2\r\n\r\nab";
	} elsif ($f < 0.85) {
		my $w = random_chunks($body);
		$w .= "0\r\n" . (rand() < 0.3 ? "X-T: t\r\n" : '') . "\r\n";
		$w = "zz\r\n" . $w if rand() < 0.05;
		$out .= "Transfer-Encoding: chunked\r\n\r\n$w";
	} else {
		$out .= "\r\n$body";
		$close = 1;
	}
	return { send => $out, close => $close };
}
my $p = port(8080);
my $b = port(8082);
my ($w) = $t->worker_pids();

sub frame { Test::Sluice::H2::frame(@_) }
sub literal { Test::Sluice::H2::literal(@_) }

# The worker's resident memory, in kB.
sub rss { rss_kb($w) }

sub serves {
	return `curl -s --max-time 5 --http2-prior-knowledge http://127.0.0.1:$p/` eq 'ok';
}

sub conns { `curl -s http://127.0.0.1:$b/conns` }

# A request head: the four pseudo-headers as literals, then $more.
sub head {
	my ($path, $more, %opts) = @_;
	return join('', map { literal(@$_) } [':method', $opts{method} // 'GET'],
		[':scheme', 'http'], [':authority', 'localhost'], [':path', $path]) . ($more // '');
}

# Writes everything, however long the peer takes to read it (up to $secs):
# false if it stopped taking bytes.
sub write_all {
	my ($s, $out, $secs) = @_;
	my $end = time() + ($secs // 10);
	my $sel = IO::Select->new($s);
	$s->blocking(0);
	while (length $out && time() < $end) {
		next unless $sel->can_write(0.2);
		my $n = syswrite($s, $out);
		last unless defined $n || $!{EAGAIN};
		substr($out, 0, $n) = '' if $n;
	}
	$s->blocking(1);
	return !length $out;
}

# HPACK bomb: "x-bomb" with a 4,000-byte value goes into the dynamic table
# (literal with incremental indexing, 0x40), then 10,000 references to it
# (0xbe: indexed, entry 62, the first dynamic one).
{
	my $before = rss();
	my $c0 = conns();
	my $s = h2_connect($p);
	my $block = head('/p/bomb', pack('CC', 0x40, 6) . 'x-bomb' . pack('CCC', 0x7f, 0x81, 0x1e) . ('b' x 4000)
		. ("\xbe" x 10000));
	syswrite($s, frame(1, 0x5, 1, $block));
	my ($f, $closed) = h2_frames($s, sub { $_[0]{type} =~ /^(?:HEADERS|GOAWAY|RST_STREAM)$/ }, 5);
	my ($last) = grep { $_->{type} =~ /^(?:HEADERS|GOAWAY|RST_STREAM)$/ } @$f;
	my $what = !$last ? 'nothing'
		: $last->{type} eq 'HEADERS' ? 'HEADERS ' . unpack('H*', $last->{payload})
		: $last->{type} . ' ' . unpack('N', substr($last->{payload}, $last->{type} eq 'GOAWAY' ? 4 : 0, 4));
	# 431 in HPACK: 0x08 (:status, literal without indexing) "431"; or
	# GOAWAY/RST_STREAM with ENHANCE_YOUR_CALM (11) or PROTOCOL_ERROR (1).
	ok($what =~ /^HEADERS 0803343331/ || $what =~ /^(?:GOAWAY|RST_STREAM) (?:11|1)$/,
		"HPACK bomb: refused ($what)");
	close $s;
	ok(rss() - $before < 8192, 'HPACK bomb: the worker grew by less than 8 MB ('
		. (rss() - $before) . ' kB)');
	is(conns(), $c0 + 1, 'HPACK bomb: nothing reached the backend');
	ok(serves(), 'HPACK bomb: the worker still serves');
}

# Zero-length header names (a name must have a token's bytes).
{
	my $c0 = conns();
	my $s = h2_connect($p);
	syswrite($s, frame(1, 0x5, 1, head('/p/empty', pack('CCC', 0, 0, 0) x 200)));
	my ($f) = h2_frames($s, sub { $_[0]{type} =~ /^(?:HEADERS|GOAWAY|RST_STREAM)$/ }, 5);
	my $answered = grep { $_->{type} eq 'HEADERS' && $_->{payload} =~ /^\x88/ } @$f;
	ok(!$answered && grep({ $_->{type} =~ /^(?:HEADERS|GOAWAY|RST_STREAM)$/ } @$f),
		'empty header names: refused, not answered 200');
	close $s;
	is(conns(), $c0 + 1, 'empty header names: nothing reached the backend');
	ok($t->waitforlog(qr/\[info\] .*client sent invalid HTTP\/2 frames: connection error detected/),
		'empty header names: logged as the client\'s invalid frames');
}

# Ping and settings floods from clients that never read. Their answers
# back up into the socket's buffers; the connection then stops being read
# (a client write blocks), and the worker's memory stays put.
for my $kind (['PING', 6, 'p' x 8], ['SETTINGS', 4, pack('nN', 3, 100)]) {
	my ($name, $type, $payload) = @$kind;
	my $before = rss();
	my $s = h2_connect($p);
	my $flood = frame($type, 0, 0, $payload) x 20000;
	my $n = 0;
	# Up to 200 rounds of 20,000 frames (68 MB of PINGs, 60 MB of SETTINGS): the worker must
	# stop taking them once the kernel's buffers on both sides (some
	# megabytes on loopback) are full of its answers.
	my $stalled = 0;
	for (1 .. 200) {
		unless (write_all($s, $flood, 2)) {
			$stalled = 1;
			last;
		}
		$n += 20000;
	}
	ok($stalled, "$name flood: the worker stopped reading a client that does not read ($n frames in)");
	ok(rss() - $before < 8192, "$name flood: the worker grew by less than 8 MB ("
		. (rss() - $before) . ' kB)');
	ok(serves(), "$name flood: the worker still serves others");
	close $s;
}

# Empty DATA frames without END_STREAM on an open request body (each costs
# a frame's work and carries nothing): 50 are let through, and the request
# goes on with its body; 50,000 on another connection get GOAWAY
# ENHANCE_YOUR_CALM (h2 takes 100 in a connection's life).
{
	my $s = h2_connect($p);
	syswrite($s, frame(1, 0x4, 1, head('/p/echo', literal('content-length', '1'), method => 'POST'))
		. (frame(0, 0, 1, '') x 50) . frame(0, 0x1, 1, 'z'));
	my ($f) = h2_frames($s, sub { $_[0]{type} eq 'DATA' && $_[0]{flags} & 1 }, 10);
	like(h2_data_of($f, 1), qr/\r\n\r\nz$/, '50 empty DATA frames: the request went on with its body')
		or diag(join(" ", map { "$_->{type}/$_->{sid}/" . length($_->{payload}) } @$f));
	close $s;

	my $floods = $t->log_count(qr/http2 flood detected/);
	$s = h2_connect($p);
	syswrite($s, frame(1, 0x4, 1, head('/p/echo', literal('content-length', '1'), method => 'POST')));
	write_all($s, frame(0, 0, 1, '') x 50000, 5);
	my $closed;
	($f, $closed) = h2_frames($s, undef, 5);
	my ($ga) = grep { $_->{type} eq 'GOAWAY' } @$f;
	my $code = $ga ? unpack('N', substr($ga->{payload}, 4, 4)) : -1;
	ok($code == 11 && $closed, "50,000 empty DATA frames: GOAWAY ENHANCE_YOUR_CALM ($code), closed");
	ok($t->waitforlog(sub { (() = $_[0] =~ /\[info\] .*http2 flood detected/g) > $floods }),
		'logged as a flood');
	close $s;
}

# 50 downloads of 5 MB on one connection whose window stays shut after the
# first 64 kB (the client never reads nor sends WINDOW_UPDATE); then a
# second such connection. A stream reads its file a buffer ahead at most
# (about 80 kB a stream measured), not as fast as the disk gives it.
{
	my $before = rss();
	my @s;
	for (1 .. 2) {
		my $s = h2_connect($p);
		syswrite($s, join('', map { frame(1, 0x5, 2 * $_ - 1, head('/big.bin')) } 1 .. 50));
		push @s, $s;
	}
	sleep 1;
	ok(rss() - $before < 32768, 'shut windows: 100 downloads of 5 MB held less than 32 MB ('
		. (rss() - $before) . ' kB)');
	ok(serves(), 'shut windows: the worker still serves');
	close $_ for @s;
}

# Random frames (a fuzz from the network's side, seeded so that a failing
# run can be replayed with H2_FUZZ_SEED): 1,000 connections (H2_FUZZ_CONNS
# for a longer run) of 40 frames each. Most are well-formed frames with random contents on the streams
# the connection opened (requests, DATA, WINDOW_UPDATE, RST_STREAM,
# PRIORITY, SETTINGS, PING, header blocks split into CONTINUATION), so
# that the state reached is deep; the rest are any type (and unknown
# ones), flags, stream and bytes. The worker must neither die (a panic is
# an [alert]) nor stop serving.
{
	my $seed = $ENV{H2_FUZZ_SEED} // int(rand(1 << 31));
	srand($seed);
	my $before = rss();
	my $rb = sub { join '', map { chr(int(rand(256))) } 1 .. $_[0] };
	for my $c (1 .. ($ENV{H2_FUZZ_CONNS} // 1000)) {
		my $s = h2_connect($p);
		my ($out, $next, @open) = ('', 1);
		my $request = sub {
			my $body = $_[0] // rand() < 0.5;
			my $path = $body || rand() < 0.5 ? '/p/echo' : rand() < 0.5 ? '/u/x' : '/';
			$out .= frame(1, $body ? 0x4 : 0x5, $next,
				head($path, undef, method => $body ? 'POST' : 'GET'));
			push @open, $next if $body;
			$next += 2;
		};
		$request->() for 0 .. int(rand(3));
		# A stream the connection opened, or now and then any.
		my $some = sub { rand() < 0.99 ? 2 * int(rand(($next - 1) / 2)) + 1 : int(rand(10)) };
		for my $i (1 .. 40) {
			my $r = rand();
			my $sid = $some->();
			if ($i > 38 && $r < 0.5) {
				# Last, any frame at all: it may well end the connection.
				$out .= frame(int(rand(12)), int(rand(256)), $sid, $rb->(int(rand(48))));
			} elsif ($r < 0.15) {
				$request->();
			} elsif ($r < 0.35) {
				# DATA on a stream whose body is open (on another, h2 ends
				# the connection: a stream half closed takes none), now and
				# then on any.
				$request->(1) unless @open;
				my $i = rand() < 0.99 ? int(rand(@open)) : undef;
				my $end = rand() < 0.3;
				$out .= frame(0, $end ? 1 : 0, defined $i ? $open[$i] : $sid, $rb->(int(rand(100))));
				splice(@open, $i, 1) if defined $i && $end;
			} elsif ($r < 0.45) {
				$out .= frame(8, 0, rand() < 0.3 ? 0 : $sid, pack('N', 1 + int(rand(1 << 20))));
			} elsif ($r < 0.55) {
				$out .= frame(3, 0, $sid, pack('N', int(rand(14))));
			} elsif ($r < 0.6) {
				$out .= frame(2, 0, $sid, pack('NC', (2 * int(rand($next)) + 1) % (2 * $next), int(rand(256))));
			} elsif ($r < 0.7) {
				# Settings with values each may take.
				my @p = ([1, int(rand(65536))], [2, 0], [3, int(rand(300))],
					[4, int(rand(1 << 24))], [5, 16384 + int(rand(1 << 16))], [6, int(rand(1 << 16))]);
				$out .= frame(4, 0, 0, join '', map { pack('nN', @$_) } grep { rand() < 0.4 } @p);
			} elsif ($r < 0.75) {
				$out .= frame(6, 0, 0, $rb->(8));
			} elsif ($r < 0.995) {
				my $block = head('/', literal('x-f', 'v' x int(rand(60))));
				my $cut = int(rand(length $block));
				$out .= frame(1, 0x1, $next, substr($block, 0, $cut))
					. frame(9, 0x4, $next, substr($block, $cut));
				$next += 2;
			} else {
				# A header block of random bytes on a new stream.
				$out .= frame(1, 0x5, $next, $rb->(int(rand(40))));
				$next += 2;
			}
		}
		write_all($s, $out, 2);
		h2_frames($s, undef, 0.02);
		close $s;
	}
	ok(scalar(grep { $_ == $w } $t->worker_pids()), "random frames (seed $seed): the worker lived");
	ok(serves(), "random frames (seed $seed): the worker serves");
	ok(rss() - $before < 16384, "random frames (seed $seed): the worker grew by less than 16 MB ("
		. (rss() - $before) . ' kB)');
}

ok(poll_until(sub { serves() }, 5), 'at the end the worker serves');
