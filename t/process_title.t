#!/usr/bin/perl

# Process titles as nginx shows them in ps (/proc/PID/cmdline): "sluice:
# master process" and the command line, "sluice: worker process", and "sluice:
# worker process is shutting down" for an old worker finishing a request
# after a reload.

use warnings;
use strict;

use Test::More;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http proxy/)->plan(6);

$t->write_file_expand('sluice.conf', <<'EOF2');

%%TEST_GLOBALS%%

worker_processes 2;

events {
}

http {
    server {
        listen 127.0.0.1:%%PORT_8080%%;
        location / { proxy_pass http://127.0.0.1:%%PORT_8081%%; }
    }
}

EOF2

# The title as ps shows it: NULs between arguments read as spaces, the
# padding cut.
sub title {
	my ($pid) = @_;
	open my $fh, '<', "/proc/$pid/cmdline" or return '';
	local $/;
	my $c = <$fh> // '';
	$c =~ s/\0+$//;
	$c =~ s/\0/ /g;
	return $c;
}

$t->backend(port(8081));
$t->run();

my $m = $t->master();
my $bin = $t->binary();
my $d = $t->testdir();
is(title($m), "sluice: master process $bin -p $d/ -c sluice.conf -e error.log",
	'master: its command line');
my @w = $t->started_workers(2);
is(scalar @w, 2, 'two workers');
is(join(',', map { title($_) } @w), 'sluice: worker process,sluice: worker process',
	'workers');

# An old worker with a request in flight after a reload.
my $slow = http_get('/slow/3/x', start => 1);
select(undef, undef, undef, 0.5);
$t->reload();
my $shutting;
poll_until(sub {
	$shutting = grep { title($_) eq 'sluice: worker process is shutting down' }
		$t->worker_pids();
	return $shutting;
}, 5);
is($shutting, 1, 'the old worker is shutting down');
like(http_end($slow), qr/^HTTP\/1.1 200/, 'and finishes its request');
ok(poll_until(sub {
	my @n = $t->worker_pids();
	return @n == 2 && !grep { title($_) ne 'sluice: worker process' } @n;
}, 5), 'the new workers');

$t->stop();
