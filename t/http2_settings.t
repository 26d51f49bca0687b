#!/usr/bin/perl

# The downstream HTTP/2 directives at run time, against the binary (until
# now only their config errors were tested):
#   - http2_max_concurrent_streams: the server's SETTINGS announce it (the
#     address's default server's; 128 when not set), and a stream beyond it
#     is refused with RST_STREAM REFUSED_STREAM, as nginx;
#   - http2_chunk_size: a response body goes in DATA frames no larger than
#     it (set in the server or the location; 8k when not set), a static
#     file's and a `return` body alike, and no larger than the client's
#     SETTINGS_MAX_FRAME_SIZE either;
#   - http2_recv_buffer_size: sluice.conf(5) says it is the flow-control
#     window sluice advertises, on each stream and on the connection (at
#     least 65535 there): SETTINGS_INITIAL_WINDOW_SIZE and the connection's
#     first WINDOW_UPDATE say so; a request body much larger than it
#     arrives whole;
#   - the total size of a request's fields (large_client_header_buffers
#     NUMBER x SIZE): many small fields over it end the connection with
#     GOAWAY ENHANCE_YOUR_CALM and log "client sent too large header", as
#     nginx 1.22 does; a block beyond what h2 decodes (twice the total, at
#     least 16k) is refused with 431 and the connection goes on (the man
#     page's word; nginx answers that with GOAWAY too);
#   - a binary upgrade (USR2, then QUIT to the old master) with an HTTP/2
#     stream in flight: the old generation sends GOAWAY at once, finishes
#     the stream, closes the connection and exits, while new connections go
#     to the new generation (mirrors t/http2_drain.t's reload case).
# Needs nghttp (nghttp2-client) and curl with HTTP/2.

use warnings;
use strict;

use Test::More;
use Time::HiRes qw/time sleep/;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;
use Test::Sluice::H2 qw/h2_connect h2_request h2_frames h2_data_of h2_block h2_status h2_close/;

plan(skip_all => 'no curl with HTTP/2') unless `curl --version 2>/dev/null` =~ /HTTP2/;
plan(skip_all => 'no nghttp (nghttp2-client)') unless `nghttp --version 2>/dev/null` =~ /nghttp2/;

my $t = Test::Sluice->new()->has(qw/http proxy/)->plan(26);
my $d = $t->testdir();

# Files of known sizes, their bytes numbered lines.
sub content { substr(join('', map { sprintf("%07d\n", $_) } 1 .. $_[0] / 8 + 1), 0, $_[0]) }
$t->write_file("f$_.txt", content($_)) for 5000, 20000, 40000;

# A token is at most 4096 bytes (nginx's too): a return body of 5000 in two.
(my $conf = <<'EOF') =~ s/R2500/'r' x 2500/e;

%%TEST_GLOBALS%%

events {
}

http {
    access_log off;
    client_max_body_size 1m;

    server {
        listen 127.0.0.1:%%PORT_8080%%;
        http2 on;
        http2_max_concurrent_streams 7;
        http2_chunk_size 3k;
        root %%TESTDIR%%;

        location / { }
        location /one/ { http2_chunk_size 1k; alias %%TESTDIR%%/; }
        location /big/ { http2_chunk_size 64k; alias %%TESTDIR%%/; }
        location = /ret { http2_chunk_size 1k; set $h "R2500"; return 200 "$h$h"; }
        location /slow/ { proxy_pass http://127.0.0.1:%%PORT_8082%%; }
        location = /pid { return 200 "pid $pid"; }
    }

    server {
        listen 127.0.0.1:%%PORT_8081%%;
        http2 on;
        root %%TESTDIR%%;
    }

    server {
        listen 127.0.0.1:%%PORT_8083%%;
        http2 on;
        large_client_header_buffers 2 1k;
        location / { return 200 "h"; }
    }
}
EOF
$t->write_file_expand('sluice.conf', $conf);
$t->backend(port(8082));
$t->run();

my ($p, $pd, $ph) = (port(8080), port(8081), port(8083));

# nghttp -nv: what it printed, and the frames it received, in order, each
# [type, length, flags, stream] and the SETTINGS' parameters (name => value)
# and WINDOW_UPDATE's increment where there are any.
sub nghttp {
	my ($url, @opts) = @_;
	my $o = `nghttp -nv --timeout=10 @opts '$url' 2>&1`;
	my @f;
	while ($o =~ /recv (\w+) frame <length=(\d+), flags=(0x\w+), stream_id=(\d+)>\n((?:[ ]{10}.*\n)*)/g) {
		my $f = { type => $1, len => $2, flags => hex $3, sid => $4 };
		my $body = $5;
		$f->{settings} = { $body =~ /\[SETTINGS_(\w+)\(0x\w+\):(\d+)\]/g } if $1 eq 'SETTINGS';
		($f->{increment}) = $body =~ /window_size_increment=(\d+)/ if $1 eq 'WINDOW_UPDATE';
		push @f, $f;
	}
	return ($o, @f);
}

# The server's first SETTINGS frame (not the ACK).
sub settings {
	my (undef, @f) = nghttp(@_);
	my ($s) = grep { $_->{type} eq 'SETTINGS' && !($_->{flags} & 1) } @f;
	return $s ? $s->{settings} : {};
}

# The lengths of the DATA frames of a response, and its status line.
sub data_lengths {
	my ($o, @f) = nghttp(@_);
	my ($status) = $o =~ /recv \(stream_id=\d+\) :status: (\d+)/;
	return join(' ', map { $_->{len} } grep { $_->{type} eq 'DATA' && $_->{len} } @f)
		. ' (' . ($status // 'none') . ')';
}

###############################################################################
# http2_max_concurrent_streams, and the window http2_recv_buffer_size
# (default 256k) sets.

my $s8080 = settings("http://127.0.0.1:$p/");
is($s8080->{MAX_CONCURRENT_STREAMS}, 7, 'http2_max_concurrent_streams 7: SETTINGS say 7');
is(settings("http://127.0.0.1:$pd/")->{MAX_CONCURRENT_STREAMS}, 128,
	'not set: SETTINGS say 128 (nginx\'s default)');
is($s8080->{INITIAL_WINDOW_SIZE}, 262144,
	'http2_recv_buffer_size default 256k: SETTINGS_INITIAL_WINDOW_SIZE 262144');
{
	my (undef, @f) = nghttp("http://127.0.0.1:$pd/");
	my ($wu) = grep { $_->{type} eq 'WINDOW_UPDATE' && $_->{sid} == 0 } @f;
	is($wu && $wu->{increment}, 262144 - 65535, 'and the connection window opened to 256k');
}

# Eight streams at once where seven are allowed: the eighth is refused
# (RST_STREAM REFUSED_STREAM, nginx's "concurrent streams exceeded"), the
# seven are answered.
{
	my $s = h2_connect($p);
	syswrite($s, join '', map { h2_request(undef, 2 * $_ + 1, "/slow/1/c$_") } 0 .. 7);
	my $ended = 0;
	my ($f) = h2_frames($s, sub { $_[0]{type} eq 'DATA' && $_[0]{flags} & 1 && ++$ended == 7 }, 8);
	my @rst = map { "$_->{sid}:" . unpack('N', $_->{payload}) } grep { $_->{type} eq 'RST_STREAM' } @$f;
	is("@rst", '15:7', 'a stream beyond http2_max_concurrent_streams: RST_STREAM REFUSED_STREAM');
	my @ok = grep { h2_data_of($f, 2 * $_ + 1) =~ m{^\d+ /slow/1/c$_$} } 0 .. 6;
	is(scalar(@ok), 7, 'the seven within it answered');
	h2_close($s);
}

###############################################################################
# http2_chunk_size: the DATA frames of a 5000-byte body.

is(data_lengths("http://127.0.0.1:$p/one/f5000.txt"), '1024 1024 1024 1024 904 (200)',
	'http2_chunk_size 1k (location): a static file in DATA frames of 1k');
is(data_lengths("http://127.0.0.1:$p/ret"), '1024 1024 1024 1024 904 (200)',
	'and a return body');
is(data_lengths("http://127.0.0.1:$p/f5000.txt"), '3072 1928 (200)',
	'http2_chunk_size 3k (server)');
is(data_lengths("http://127.0.0.1:$pd/f20000.txt"), '8192 8192 3616 (200)',
	'not set: 8k');
is(data_lengths("http://127.0.0.1:$p/big/f40000.txt"), '16384 16384 7232 (200)',
	'64k: no larger than the client\'s SETTINGS_MAX_FRAME_SIZE (16384)');

###############################################################################
# The total size of a request's fields: large_client_header_buffers 2 1k
# allows 2048 bytes, names and values (pseudo-header fields too, in nginx).

# A GET of / with $bytes of fields (names and values) in fields of at most
# 100 bytes: the frames that came, whether it closed, and how it went.
sub fields_request {
	my ($s, $sid, $bytes) = @_;
	my @h = ([':method', 'GET'], [':scheme', 'http'], [':path', '/'], [':authority', 'localhost']);
	for (my $i = 0; $bytes > 0; $i++) {
		my $v = $bytes - 5 > 95 ? 95 : $bytes - 5;
		push @h, [sprintf('x-%02d', $i), 'v' x $v];
		$bytes -= 5 + $v;
	}
	# In frames of at most 16384 bytes: HEADERS, then CONTINUATION.
	my @piece = unpack('(a16384)*', h2_block(@h));
	my $out = '';
	for my $i (0 .. $#piece) {
		$out .= Test::Sluice::H2::frame($i ? 9 : 1,
			($i ? 0 : 0x1) | ($i == $#piece ? 0x4 : 0), $sid, $piece[$i]);
	}
	syswrite($s, $out);
	my ($f, $closed) = h2_frames($s, sub {
		$_[0]{type} eq 'GOAWAY' || $_[0]{sid} == $sid
			&& ($_[0]{type} eq 'RST_STREAM' || $_[0]{flags} & 1) }, 5);
	my @got = map {
		$_->{type} eq 'HEADERS' ? "HEADERS " . h2_status($_->{payload})
		: $_->{type} eq 'GOAWAY' ? "GOAWAY " . unpack('N', substr($_->{payload}, 4, 4))
		: $_->{type} eq 'RST_STREAM' ? "RST_STREAM " . unpack('N', $_->{payload})
		: $_->{type}
	} grep { $_->{sid} == $sid || $_->{type} eq 'GOAWAY' } @$f;
	return "@got";
}

# The pseudo-header fields take 7+3 + 7+4 + 5+1 + 10+9 = 46 bytes.
{
	my $s = h2_connect($ph);
	is(fields_request($s, 1, 1900), 'HEADERS 200 DATA', 'fields within the total: answered');
	h2_close($s);
}
{
	my $s = h2_connect($ph);
	is(fields_request($s, 1, 3000), 'GOAWAY 11',
		'many small fields over the total: GOAWAY ENHANCE_YOUR_CALM, no response');
	h2_close($s);
	ok($t->waitforlog(qr/\[info\] .*client sent too large header(?! field)/),
		'logged "client sent too large header", as nginx');
}
# The boundary, the pseudo-header fields counted with their names as nginx
# 1.22 counts them (measured beside it): `fields_request`'s 2023 is 2002
# bytes of names and values, 2048 in all; 2024 one more.
{
	my $s = h2_connect($ph);
	is(fields_request($s, 1, 2023), 'HEADERS 200 DATA', 'fields of 2048 bytes with the pseudo-header ones: answered');
	h2_close($s);
	$s = h2_connect($ph);
	is(fields_request($s, 1, 2024), 'GOAWAY 11',
		'2049 bytes with the pseudo-header ones: GOAWAY, as nginx');
	h2_close($s);
}
# Beyond what h2 decodes (twice the total, at least 16k): 431, the
# stream ended by it; the connection goes on.
{
	my $s = h2_connect($ph);
	is(fields_request($s, 1, 20000), 'HEADERS 431',
		'fields beyond h2\'s limit: 431 (sluice.conf(5))');
	is(fields_request($s, 3, 100), 'HEADERS 200 DATA', 'and the connection goes on');
	h2_close($s);
}

###############################################################################
# http2_recv_buffer_size 1k, another instance: the windows, and a request
# body far larger than it (and than the connection's window) arrives whole.

{
	my $t2 = Test::Sluice->new();
	$t2->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

http {
    access_log off;
    http2_recv_buffer_size 1k;

    server {
        listen 127.0.0.1:%%PORT_8090%%;
        http2 on;
        client_max_body_size 1m;
        location / { proxy_pass http://127.0.0.1:%%PORT_8082%%; }
    }
}
EOF
	$t2->run();
	my $pb = port(8090);
	my (undef, @f) = nghttp("http://127.0.0.1:$pb/");
	my ($st) = grep { $_->{type} eq 'SETTINGS' && !($_->{flags} & 1) } @f;
	is($st && $st->{settings}{INITIAL_WINDOW_SIZE}, 1024,
		'http2_recv_buffer_size 1k: SETTINGS_INITIAL_WINDOW_SIZE 1024 (sluice.conf(5))');
	ok($st && !grep({ $_->{type} eq 'WINDOW_UPDATE' && $_->{sid} == 0 } @f),
		'the connection window stays 65535 (no WINDOW_UPDATE at the start)');

	my $body = content(200000);
	$t2->write_file('up.bin', $body);
	my $got = `curl -s --max-time 20 --http2-prior-knowledge --data-binary \@${\ $t2->testdir()}/up.bin -H 'Content-Type: application/octet-stream' http://127.0.0.1:$pb/echo`;
	ok($got =~ /^content-length: 200000\r?$/mi && length($got) > length($body)
		&& substr($got, -length($body)) eq $body,
		'a 200000-byte request body with a 1k receive buffer arrives whole')
		or diag(length($got) . ' bytes: ' . substr($got, 0, 300));
	$t2->stop();
}

###############################################################################
# A binary upgrade with an HTTP/2 stream in flight on the old generation.

# The pids whose parent is $ppid.
sub children_of {
	my ($ppid) = @_;
	my @c;
	opendir my $dh, '/proc' or return ();
	for my $pid (grep { /^\d+$/ } readdir $dh) {
		open my $fh, '<', "/proc/$pid/stat" or next;
		my $stat = <$fh> // '';
		push @c, $pid if $stat =~ /\)\s+\S+\s+(\d+)/ && $1 == $ppid;
	}
	return @c;
}

sub pid_in {
	my ($file) = @_;
	my $pid = -e "$d/$file" ? $t->read_file($file) : '';
	chomp $pid;
	return $pid;
}

# The new master, stopped here if the test ends before the harness has it.
my $new;
END {
	if ($new && (!$t->{_master} || $t->{_master} != $new) && kill(0, $new)) {
		kill 'QUIT', $new;
		poll_until(sub { !kill 0, $new }, 10) or kill 'KILL', $new;
	}
}

{
	my $old = $t->master();
	my $s = h2_connect($p);
	h2_request($s, 1, '/slow/2/inflight');
	# The request is at the backend.
	sleep 0.5;
	kill 'USR2', $old;
	ok(poll_until(sub { my $n = pid_in('sluice.pid'); pid_in('sluice.pid.oldbin') eq $old
		&& $n =~ /^\d+$/ && $n != $old && children_of($n) }, 5),
		'USR2: a new master with workers') or diag($t->read_file('error.log'));
	$new = pid_in('sluice.pid');
	$new = undef unless $new =~ /^\d+$/ && $new != $old;
	kill 'QUIT', $old;
	my $t0 = time();

	# New connections: the new generation's workers (the first may still
	# have met an old worker that had not closed its listeners yet).
	my $by_new = sub {
		my ($w) = `curl -s --max-time 5 --http2-prior-knowledge http://127.0.0.1:$p/pid` =~ /pid (\d+)/;
		return $w && grep { $_ == $w } children_of($new);
	};
	ok($new && poll_until($by_new, 5) && !grep({ !$by_new->() } 1 .. 5),
		'after QUIT to the old master, new connections go to the new generation');

	my ($f, $closed) = h2_frames($s, undef, 10);
	my ($ga) = grep { $f->[$_]{type} eq 'GOAWAY' } 0 .. $#$f;
	my ($end) = grep { $f->[$_]{type} eq 'DATA' && $f->[$_]{sid} == 1 && $f->[$_]{flags} & 1 } 0 .. $#$f;
	my @goaway = map { [unpack('NN', $_->{payload})] } grep { $_->{type} eq 'GOAWAY' } @$f;
	ok(defined $ga && defined $end && $ga < $end && !grep({ $_->[1] != 0 } @goaway)
		&& ($goaway[-1][0] & 0x7fffffff) >= 1,
		'the old connection got GOAWAY NO_ERROR at once, the stream still in flight')
		or diag('frames: ' . join(' ', map { "$_->{type}/$_->{sid}/$_->{flags}" } @$f));
	my ($hd) = grep { $_->{type} eq 'HEADERS' && $_->{sid} == 1 } @$f;
	ok($hd && h2_status($hd->{payload}) eq '200' && h2_data_of($f, 1) =~ m{^\d+ /slow/2/inflight$},
		'the in-flight stream finished on the old generation');
	ok($closed && $t->wait_exit(10), 'then the connection closed and the old master exited');
	h2_close($s);
	# The harness stops the new master at the end, once the old one has
	# gone (else it stops the old one, and the END above the new one).
	$t->{_master} = $new if $new && !$t->{_master};
}
